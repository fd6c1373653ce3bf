package main

// The `admission` op: a ValidatingAdmissionPolicy's variables and validations compiled and run as Kubernetes'
// own admission plugin does (k8s.io/apiserver pkg/admission/plugin/policy/validating, plugin.go compilePolicy: the
// composition environment over the base CEL environment set at DefaultCompatibilityVersion, with strict cost
// enforcement, variables stored first, then the validations and their messageExpressions; validator.go Validate
// with the runtime cost budget of apis/cel/config.go). matchConstraints and the binding's selectors are not
// evaluated here: the request names the object the policy is meant for.

import (
	"context"
	"encoding/json"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
)

type decision struct {
	Action     string `json:"action"`
	Evaluation string `json:"evaluation"`
	Message    string `json:"message"`
}

// admit evaluates `policy` (a ValidatingAdmissionPolicy, as JSON) on the CREATE of `object` (JSON, resource
// `resource` as group/version/resource) and returns every decision.
func admit(ctx context.Context, policyJSON, objectJSON json.RawMessage, resource string) ([]decision, error) {
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	if err := json.Unmarshal(policyJSON, &policy); err != nil {
		return nil, fmt.Errorf("not a ValidatingAdmissionPolicy: %w", err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(objectJSON); err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	gvr, _ := schema.ParseResourceArg(resource)
	if gvr == nil {
		return nil, fmt.Errorf("resource %q: expected resource.version.group", resource)
	}
	env, err := plugincel.NewCompositionEnv(plugincel.VariablesTypeName,
		environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion(), true))
	if err != nil {
		return nil, err
	}
	hasParams := policy.Spec.ParamKind != nil
	vars := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true, StrictCost: true}
	msgVars := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: false, StrictCost: true}
	compiler := plugincel.NewCompositedCompilerFromTemplate(env)
	variables := make([]plugincel.NamedExpressionAccessor, len(policy.Spec.Variables))
	for i, v := range policy.Spec.Variables {
		variables[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	compiler.CompileAndStoreVariables(variables, vars, environment.StoredExpressions)
	validations := make([]plugincel.ExpressionAccessor, len(policy.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(policy.Spec.Validations))
	for i, v := range policy.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	validator := validating.NewValidator(
		compiler.CompileCondition(validations, vars, environment.StoredExpressions),
		nil,
		compiler.CompileCondition(nil, vars, environment.StoredExpressions),
		compiler.CompileCondition(messages, msgVars, environment.StoredExpressions),
		policy.Spec.FailurePolicy,
	)
	gvk := obj.GroupVersionKind()
	attr := admission.NewAttributesRecord(obj, nil, gvk, obj.GetNamespace(), obj.GetName(), *gvr, "",
		admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "distillery-submitter"})
	versioned := &admission.VersionedAttributes{Attributes: attr, VersionedKind: gvk, VersionedObject: obj}
	result := validator.Validate(ctx, *gvr, versioned, nil, nil, celconfig.RuntimeCELCostBudget, nil)
	out := make([]decision, 0, len(result.Decisions))
	for _, d := range result.Decisions {
		out = append(out, decision{Action: string(d.Action), Evaluation: string(d.Evaluation), Message: d.Message})
	}
	return out, nil
}

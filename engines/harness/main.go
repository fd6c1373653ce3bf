// Command harness answers the Python tests' questions with the engines' own Go packages: Argo Workflows' expression
// evaluation (expr-lang through Argo's util/template and util/expr), its `when` evaluation (govaluate, as
// workflow/controller/steps.go shouldExecute), its template-referencing allow-list (util.ValidateUserOverrides) and
// apimachinery's label-selector parser, which Argo's executor uses for resource conditions.
//
// One JSON object on stdin, {"requests": [...]}, one on stdout, {"results": [...]}, a result per request in order:
// {"value": ...} or {"error": "..."}. Requests, by "op":
//
//	retry      {"expression", "node": {"exitCode", "phase", "message", "duration", "retries"}}: operator.go
//	           processNodeRetries: argoexpr.EvalBool(expression, env.GetFuncMap(scope)), the scope built as
//	           buildRetryStrategyLocalScope builds it (exitCode "-1" when the node has none)
//	replace    {"text", "vars", "allowUnresolved"}: util/template.Replace on a JSON string (what the controller does
//	           to a template before running it); {{=…}} tags are compiled and run by expr-lang with Argo's functions
//	when       {"text"}: a substituted `when`, evaluated as shouldExecute does
//	selector   {"text"}: labels.Parse (workflow/executor/resource.go: successCondition / failureCondition)
//	overrides  {"spec"}: util.ValidateUserOverrides on a WorkflowSpec (templateReferencing: Strict / Secure)
//	compile    {"expression", "env"}: expr.Compile with expr.Env(env.GetFuncMap(env)), nothing run
//	admission  {"policy", "object", "resource"}: a ValidatingAdmissionPolicy (JSON) on the CREATE of `object` (JSON;
//	           `resource` as resource.version.group), compiled and run as the API server's admission plugin does
//	           (admission.go); the value is every decision: [{"action", "evaluation", "message"}]
//
// `harness resource <action>` is Argo's `argoexec resource` on Argo's executor package instead (resource.go).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/Knetic/govaluate"
	"github.com/expr-lang/expr"
	"k8s.io/apimachinery/pkg/labels"

	wfv1 "github.com/argoproj/argo-workflows/v4/pkg/apis/workflow/v1alpha1"
	"github.com/argoproj/argo-workflows/v4/util/expr/argoexpr"
	"github.com/argoproj/argo-workflows/v4/util/expr/env"
	"github.com/argoproj/argo-workflows/v4/util/logging"
	"github.com/argoproj/argo-workflows/v4/util/template"
	"github.com/argoproj/argo-workflows/v4/workflow/common"
	wfutil "github.com/argoproj/argo-workflows/v4/workflow/util"
)

type node struct {
	ExitCode *string `json:"exitCode"`
	Phase    string  `json:"phase"`
	Message  string  `json:"message"`
	Duration float64 `json:"duration"`
	Retries  int     `json:"retries"`
}

type request struct {
	Op              string            `json:"op"`
	Expression      string            `json:"expression"`
	Text            string            `json:"text"`
	Vars            map[string]string `json:"vars"`
	AllowUnresolved bool              `json:"allowUnresolved"`
	Node            node              `json:"node"`
	Env             map[string]any    `json:"env"`
	Spec            json.RawMessage   `json:"spec"`
	Policy          json.RawMessage   `json:"policy"`
	Object          json.RawMessage   `json:"object"`
	Resource        string            `json:"resource"`
}

type result struct {
	Value any    `json:"value,omitempty"`
	Error string `json:"error,omitempty"`
}

func retryScope(n node) map[string]any {
	exitCode := "-1"
	if n.ExitCode != nil {
		exitCode = *n.ExitCode
	}
	return map[string]any{
		common.LocalVarRetries:             strconv.Itoa(n.Retries),
		common.LocalVarRetriesLastExitCode: exitCode,
		common.LocalVarRetriesLastStatus:   n.Phase,
		common.LocalVarRetriesLastDuration: fmt.Sprint(n.Duration),
		common.LocalVarRetriesLastMessage:  n.Message,
	}
}

// when is workflow/controller/steps.go shouldExecute (unexported there): govaluate, its variables read as strings.
func when(text string) (bool, error) {
	expression, err := govaluate.NewEvaluableExpression(text)
	if err != nil {
		return false, fmt.Errorf("Invalid 'when' expression '%s': %v", text, err)
	}
	tokens := expression.Tokens()
	for i, tok := range tokens {
		if tok.Kind == govaluate.VARIABLE {
			tok.Kind = govaluate.STRING
			tokens[i] = tok
		}
	}
	expression, err = govaluate.NewEvaluableExpressionFromTokens(tokens)
	if err != nil {
		return false, fmt.Errorf("Failed to parse 'when' expression '%s': %v", text, err)
	}
	out, err := expression.Evaluate(nil)
	if err != nil {
		return false, fmt.Errorf("Failed to evaluate 'when' expresion '%s': %v", text, err)
	}
	b, ok := out.(bool)
	if !ok {
		return false, fmt.Errorf("Expected boolean evaluation for '%s'. Got %v", text, out)
	}
	return b, nil
}

func answer(ctx context.Context, r request) (any, error) {
	switch r.Op {
	case "retry":
		return argoexpr.EvalBool(r.Expression, env.GetFuncMap(retryScope(r.Node)))
	case "replace":
		return template.Replace(ctx, r.Text, r.Vars, r.AllowUnresolved)
	case "when":
		return when(r.Text)
	case "selector":
		selector, err := labels.Parse(r.Text)
		if err != nil {
			return nil, err
		}
		reqs, _ := selector.Requirements()
		out := make([]string, 0, len(reqs))
		for _, q := range reqs {
			out = append(out, q.String())
		}
		return out, nil
	case "overrides":
		var spec wfv1.WorkflowSpec
		if err := json.Unmarshal(r.Spec, &spec); err != nil {
			return nil, fmt.Errorf("not a WorkflowSpec: %w", err)
		}
		if err := wfutil.ValidateUserOverrides(&spec); err != nil {
			return nil, err
		}
		return true, nil
	case "compile":
		_, err := expr.Compile(r.Expression, expr.Env(env.GetFuncMap(r.Env)))
		if err != nil {
			return nil, err
		}
		return true, nil
	case "admission":
		return admit(ctx, r.Policy, r.Object, r.Resource)
	}
	return nil, fmt.Errorf("unknown op %q (one of retry, replace, when, selector, overrides, compile, admission)", r.Op)
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "resource" {
		os.Exit(resourceMain(os.Args[2]))
	}
	var in struct {
		Requests []request `json:"requests"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "harness: stdin is not {\"requests\": [...]}:", err)
		os.Exit(2)
	}
	ctx := logging.WithLogger(context.Background(), logging.NewSlogLoggerCustom(logging.Error, logging.JSON, os.Stderr))
	results := make([]result, len(in.Requests))
	for i, r := range in.Requests {
		value, err := answer(ctx, r)
		if err != nil {
			results[i] = result{Error: strings.TrimSpace(err.Error())}
		} else {
			results[i] = result{Value: value}
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(map[string]any{"results": results}); err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		os.Exit(1)
	}
}

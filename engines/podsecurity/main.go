// Command podsecurity evaluates pods with Kubernetes' own Pod Security Standards evaluator
// (k8s.io/pod-security-admission/policy, the code the API server's PodSecurity admission plugin runs).
//
// stdin: {"level": "restricted", "version": "latest" or "v1.33", "pods": {"name": Pod, ...}}
// stdout: {"results": {"name": {"allowed": bool, "reason": "...", "detail": "..."}, ...}}
// The reason and detail are what the API server puts in its "violates PodSecurity" refusal.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

type verdict struct {
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "podsecurity: "+format+"\n", args...)
	os.Exit(2)
}

func main() {
	var in struct {
		Level   string                `json:"level"`
		Version string                `json:"version"`
		Pods    map[string]corev1.Pod `json:"pods"`
	}
	decoder := json.NewDecoder(os.Stdin)
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&in); err != nil {
		fail("stdin is not {level, version, pods}: %v", err)
	}
	level, err := psapi.ParseLevel(in.Level)
	if err != nil {
		fail("%v", err)
	}
	version, err := psapi.ParseVersion(in.Version)
	if err != nil {
		fail("%v", err)
	}
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks())
	if err != nil {
		fail("%v", err)
	}
	lv := psapi.LevelVersion{Level: level, Version: version}
	out := make(map[string]verdict, len(in.Pods))
	for name, pod := range in.Pods {
		agg := policy.AggregateCheckResults(evaluator.EvaluatePod(lv, &pod.ObjectMeta, &pod.Spec))
		out[name] = verdict{Allowed: agg.Allowed, Reason: agg.ForbiddenReason(), Detail: agg.ForbiddenDetail()}
	}
	if err := json.NewEncoder(os.Stdout).Encode(map[string]any{"results": out}); err != nil {
		fail("%v", err)
	}
}

package main

// `harness resource <action>`: what Argo v4.0.5's `argoexec resource <action>` does in a resource step's `main`
// container (cmd/argoexec/commands/resource.go execResource, cmd/argoexec/executor/init.go Init), on Argo's own
// workflow/executor package: the WorkflowTaskResult created, the manifest staged and run through kubectl, the
// success/failure conditions polled (WaitResource), the output parameters saved, the result reported.
//
// Why not argoexec itself: it does not build from the v4.0.5 module zip the proxy serves (`go build ./cmd/argoexec`:
// workflow/executor/osspecific/command_unix.go:37:3: undefined: Setpgid; the zip has no osspecific/signal_linux.go).
// That package is the emissary's process handling, which a resource step does not use; workflow/executor builds.
//
// The environment is the container's (ARGO_POD_NAME, ARGO_TEMPLATE, ARGO_NODE_ID, …, as the controller sets it); the
// cluster and identity come from $KUBECONFIG (in a pod: the executor's service-account token).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	wfv1 "github.com/argoproj/argo-workflows/v4/pkg/apis/workflow/v1alpha1"
	"github.com/argoproj/argo-workflows/v4/pkg/client/clientset/versioned"
	"github.com/argoproj/argo-workflows/v4/util/logging"
	"github.com/argoproj/argo-workflows/v4/workflow/common"
	"github.com/argoproj/argo-workflows/v4/workflow/executor"
)

// noRuntime: a resource step has no container to wait for, copy from or kill (argoexec's emissary is not used).
type noRuntime struct{}

func (noRuntime) GetFileContents(string, string) (string, error) {
	return "", fmt.Errorf("no container runtime in a resource step")
}
func (noRuntime) CopyFile(context.Context, string, string, string, int) error {
	return fmt.Errorf("no container runtime in a resource step")
}
func (noRuntime) GetOutputStream(context.Context, string, bool) (io.ReadCloser, error) {
	return nil, fmt.Errorf("no container runtime in a resource step")
}
func (noRuntime) Wait(context.Context, []string) error                { return nil }
func (noRuntime) Kill(context.Context, []string, time.Duration) error { return nil }

func resourceMain(action string) int {
	ctx := logging.WithLogger(context.Background(), logging.NewSlogLoggerCustom(logging.Info, logging.Text, os.Stderr))
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "harness resource:", err)
		return 1
	}
	// init.go Init
	clientConfig := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{})
	config, err := clientConfig.ClientConfig()
	if err != nil {
		return fail(err)
	}
	namespace, _, err := clientConfig.Namespace()
	if err != nil {
		return fail(err)
	}
	clientset, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fail(err)
	}
	raw, ok := os.LookupEnv(common.EnvVarTemplate)
	if !ok { // what the init container wrote
		data, err := os.ReadFile(common.VarRunArgoPath + "/template")
		if err != nil {
			return fail(err)
		}
		raw = string(data)
	}
	tmpl := wfv1.Template{}
	if err := json.Unmarshal([]byte(raw), &tmpl); err != nil {
		return fail(fmt.Errorf("%s: %w", common.EnvVarTemplate, err))
	}
	deadline, err := time.Parse(time.RFC3339, os.Getenv(common.EnvVarDeadline))
	if err != nil {
		return fail(err)
	}
	we := executor.NewExecutor(ctx, clientset,
		versioned.NewForConfigOrDie(config).ArgoprojV1alpha1().WorkflowTaskResults(namespace),
		clientset.RESTClient(), os.Getenv(common.EnvVarPodName), types.UID(os.Getenv(common.EnvVarPodUID)),
		os.Getenv(common.EnvVarWorkflowName), types.UID(os.Getenv(common.EnvVarWorkflowUID)),
		os.Getenv(common.EnvVarNodeID), namespace, noRuntime{}, tmpl, false, deadline, 0, 0)

	// resource.go execResource (less HandleError: it writes the termination message to /dev/termination-log)
	we.InitializeOutput(ctx)
	if !we.Template.SaveLogsAsArtifact() {
		defer we.FinalizeOutput(ctx)
	}
	if err := run(ctx, &we, action); err != nil {
		we.AddError(ctx, err)
		fmt.Fprintln(os.Stderr, "harness resource:", err)
		return 1
	}
	return 0
}

func run(ctx context.Context, we *executor.WorkflowExecutor, action string) error {
	if err := we.StageFiles(ctx); err != nil {
		return err
	}
	isDelete := action == "delete"
	if isDelete && (we.Template.Resource.SuccessCondition != "" || we.Template.Resource.FailureCondition != "" ||
		len(we.Template.Outputs.Parameters) > 0) {
		return fmt.Errorf("successCondition, failureCondition and outputs are not supported for delete action")
	}
	ns, name, selfLink, err := we.ExecResource(ctx, action, common.ExecutorResourceManifestPath, we.Template.Resource.Flags)
	if err != nil {
		return err
	}
	if isDelete {
		return nil
	}
	if err := we.WaitResource(ctx, ns, name, selfLink); err != nil {
		return err
	}
	return we.SaveResourceParameters(ctx, ns, name)
}

// Command controlplane runs a local Kubernetes control plane for the demo and for manual work:
// etcd and kube-apiserver (through envtest) and, optionally, kube-controller-manager with the
// PersistentVolume controllers, so claims bind and protected volumes are released for real.
// It writes an admin kubeconfig, prints "ready", and stops everything on SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/flashcache/flashcache/operator/internal/testenv"
)

// persistentVolumeControllers are the kube-controller-manager loops a local volume needs: the
// binder matches claims to volumes, the protection controllers release deleted ones once unused.
const persistentVolumeControllers = "persistentvolume-binder-controller,persistentvolume-protection-controller,persistentvolumeclaim-protection-controller"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
}

func run() error {
	// A flag set of our own: controller-runtime registers --kubeconfig on the global one.
	flags := flag.NewFlagSet("controlplane", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "where to write the admin kubeconfig (required)")
	withKCM := flags.Bool("with-controller-manager", false, "also run kube-controller-manager's PersistentVolume controllers")
	_ = flags.Parse(os.Args[1:])
	if *kubeconfig == "" {
		return fmt.Errorf("--kubeconfig is required")
	}

	env, _, err := testenv.Start()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	if err := testenv.WriteAdminKubeconfig(env, *kubeconfig); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *withKCM {
		assets, err := testenv.Assets()
		if err != nil {
			return err
		}
		kcm := exec.CommandContext(ctx, filepath.Join(assets, "kube-controller-manager"),
			"--kubeconfig", *kubeconfig,
			"--controllers", persistentVolumeControllers,
			"--leader-elect=false",
			"--secure-port=0",
			"--use-service-account-credentials=false",
		)
		kcm.Stdout, kcm.Stderr = os.Stderr, os.Stderr
		if err := kcm.Start(); err != nil {
			return fmt.Errorf("starting kube-controller-manager: %w", err)
		}
		defer func() { _ = kcm.Wait() }()
	}
	fmt.Println("ready")
	<-ctx.Done()
	return nil
}

package csi

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// What the kubelet reads from the registration socket: a CSI plugin of this driver's name, and
// the node service's socket as a path.
func TestTheRegistrationSocketNamesTheDriverAndItsEndpoint(t *testing.T) {
	dir := t.TempDir()
	r := &Registrar{Socket: filepath.Join(dir, "reg.sock"), Endpoint: "unix:///var/lib/kubelet/plugins/csi.flashcache.io/csi.sock", Log: logr.Discard()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	conn, err := grpc.NewClient("unix://"+r.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := registration.NewRegistrationClient(conn)
	var info *registration.PluginInfo
	for info == nil {
		if info, err = client.GetInfo(ctx, &registration.InfoRequest{}); err != nil && ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if info.GetType() != registration.CSIPlugin || info.GetName() != DriverName ||
		info.GetEndpoint() != "/var/lib/kubelet/plugins/csi.flashcache.io/csi.sock" || info.GetSupportedVersions()[0] != "1.0.0" {
		t.Errorf("plugin info %v", info)
	}
	if _, err := client.NotifyRegistrationStatus(ctx, &registration.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Errorf("registration status: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serving: %v", err)
	}
}

package csi

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// DefaultRegistrationSocket is where the kubelet looks for plugins: a socket in its
// plugins_registry folder. The agent registers itself there, as node-driver-registrar would for
// a driver that runs beside it.
const DefaultRegistrationSocket = "/var/lib/kubelet/plugins_registry/" + DriverName + "-reg.sock"

// Registrar tells the kubelet about the node service, through the kubelet's plugin-registration
// API: the kubelet finds the socket, asks GetInfo, connects to the CSI endpoint it names, calls
// NodeGetInfo, and says how that went.
type Registrar struct {
	registration.UnimplementedRegistrationServer
	// Socket is the registration socket in the kubelet's plugins_registry folder.
	Socket string
	// Endpoint is the node service's socket as the kubelet sees it on the host.
	Endpoint string
	Log      logr.Logger
}

func (r *Registrar) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	path, err := socketPath(r.Endpoint)
	if err != nil {
		return nil, err
	}
	return &registration.PluginInfo{Type: registration.CSIPlugin, Name: DriverName, Endpoint: path, SupportedVersions: []string{"1.0.0"}}, nil
}

func (r *Registrar) NotifyRegistrationStatus(_ context.Context, s *registration.RegistrationStatus) (*registration.RegistrationStatusResponse, error) {
	if s.GetPluginRegistered() {
		r.Log.Info("the kubelet registered the CSI driver", "driver", DriverName)
	} else {
		// The kubelet tries again while the socket is there; the error says what to fix.
		r.Log.Error(fmt.Errorf("%s", s.GetError()), "the kubelet refused to register the CSI driver", "driver", DriverName)
	}
	return &registration.RegistrationStatusResponse{}, nil
}

// Start serves the registration socket until ctx ends.
func (r *Registrar) Start(ctx context.Context) error {
	listener, err := listen(r.Socket)
	if err != nil {
		return fmt.Errorf("kubelet plugin registration: %w", err)
	}
	server := grpc.NewServer()
	registration.RegisterRegistrationServer(server, r)
	r.Log.Info("waiting for the kubelet to register the CSI driver", "socket", r.Socket, "endpoint", r.Endpoint)
	if err := serve(ctx, server, listener); err != nil {
		return fmt.Errorf("kubelet plugin registration: %w", err)
	}
	return nil
}

// NeedLeaderElection is false: every node's agent registers with its own kubelet.
func (r *Registrar) NeedLeaderElection() bool { return false }

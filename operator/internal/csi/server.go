package csi

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
)

// Server serves CSI services on a unix socket, where the sidecars (and kubelet, for the node
// service) reach them. It is a controller-runtime Runnable that runs on every replica: each
// replica's sidecars talk to their own pod's socket, and the sidecars elect their own leader.
type Server struct {
	// Endpoint is unix:///path/to/csi.sock, or a plain path.
	Endpoint   string
	Identity   csi.IdentityServer
	Controller csi.ControllerServer
	Node       csi.NodeServer
	Log        logr.Logger
}

// socketPath is the filesystem path of a unix endpoint.
func socketPath(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("CSI endpoint %q: %w", endpoint, err)
	}
	switch u.Scheme {
	case "unix":
		return filepath.Join(u.Host, u.Path), nil
	case "":
		return endpoint, nil
	}
	return "", fmt.Errorf("CSI endpoint %q: only unix sockets are served", endpoint)
}

// listen listens on a unix endpoint. A socket left by a process that died is removed first:
// nothing else listens there, the sidecars and the kubelet only connect.
func listen(endpoint string) (net.Listener, error) {
	path, err := socketPath(endpoint)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("the socket's folder: %w", err)
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("removing the old socket %s: %w", path, err)
	}
	listener, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	return listener, nil
}

// serve serves until ctx ends.
func serve(ctx context.Context, server *grpc.Server, listener net.Listener) error {
	go func() {
		<-ctx.Done()
		server.GracefulStop()
	}()
	return server.Serve(listener)
}

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	listener, err := listen(s.Endpoint)
	if err != nil {
		return fmt.Errorf("CSI: %w", err)
	}
	server := grpc.NewServer(grpc.ChainUnaryInterceptor(s.logCalls))
	csi.RegisterIdentityServer(server, s.Identity)
	if s.Controller != nil {
		csi.RegisterControllerServer(server, s.Controller)
	}
	if s.Node != nil {
		csi.RegisterNodeServer(server, s.Node)
	}
	s.Log.Info("serving CSI", "endpoint", s.Endpoint, "controller", s.Controller != nil, "node", s.Node != nil)
	if err := serve(ctx, server, listener); err != nil {
		return fmt.Errorf("serving CSI: %w", err)
	}
	return nil
}

// NeedLeaderElection is false: every replica serves its own sidecars.
func (s *Server) NeedLeaderElection() bool { return false }

// logCalls logs every call that fails, with its method: what the sidecar retries, the log shows.
func (s *Server) logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil {
		s.Log.Info("CSI call failed", "method", info.FullMethod, "error", err.Error())
	}
	return resp, err
}

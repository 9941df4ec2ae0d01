package grpcretry_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/closingtime-dev/closingtime/retry"
	"github.com/closingtime-dev/closingtime/retry/grpcretry"
)

// flakyHealth is a health server that answers its first Check UNAVAILABLE,
// as an overloaded server would, and the others SERVING.
type flakyHealth struct {
	healthpb.UnimplementedHealthServer
	calls atomic.Int32
}

func (h *flakyHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if h.calls.Add(1) == 1 {
		return nil, status.Error(codes.Unavailable, "overloaded")
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// A call that reached the server and failed UNAVAILABLE is made again only
// if its method is idempotent, as a health check is; a call that never
// reached a server would be made again whatever its method.
func ExampleInterceptor() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := grpc.NewServer()
	health := &flakyHealth{}
	healthpb.RegisterHealthServer(srv, health)
	go srv.Serve(lis)
	defer srv.Stop()

	for _, tt := range []struct {
		name string
		ic   grpcretry.Interceptor
	}{
		{"no method idempotent", grpcretry.Interceptor{}},
		{"Check idempotent", grpcretry.Interceptor{Idempotent: func(method string) bool {
			return method == healthpb.Health_Check_FullMethodName
		}}},
	} {
		health.calls.Store(0)
		conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithUnaryInterceptor(tt.ic.Unary))
		if err != nil {
			fmt.Println(err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		conn.Close()
		if err != nil {
			fmt.Printf("%s: %v (server calls: %d)\n", tt.name, status.Code(err), health.calls.Load())
			continue
		}
		fmt.Printf("%s: %v (server calls: %d)\n", tt.name, resp.GetStatus(), health.calls.Load())
	}
	// Output:
	// no method idempotent: Unavailable (server calls: 1)
	// Check idempotent: SERVING (server calls: 2)
}

// The channel of a service's client: its read-only methods are
// idempotent, and the Policy gives a rollout's replaced pods a few seconds.
// Each call's deadline bounds its retries.
func ExampleInterceptor_Unary() {
	idempotent := map[string]bool{
		"/orders.v1.Orders/GetOrder":   true,
		"/orders.v1.Orders/ListOrders": true,
	}
	ic := grpcretry.Interceptor{
		Policy:     retry.Policy{Attempts: 5, BaseDelay: 250 * time.Millisecond, MaxDelay: 2 * time.Second},
		Idempotent: func(method string) bool { return idempotent[method] },
	}
	conn, err := grpc.NewClient("dns:///orders.shop.svc.cluster.local:50051",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(ic.Unary))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	// Calls through conn: orders.NewOrdersClient(conn).GetOrder(ctx, …)
}

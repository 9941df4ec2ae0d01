package load

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/closingtime-dev/closingtime/internal/labpb"
)

// benchLab answers Work at once, naming its pod, as the lab server does.
type benchLab struct{ labpb.UnimplementedLabServer }

func (benchLab) Work(ctx context.Context, _ *labpb.WorkRequest) (*labpb.WorkReply, error) {
	grpc.SetHeader(ctx, metadata.Pairs(grpcPodKey, "bench"))
	return &labpb.WorkReply{}, nil
}

// BenchmarkGRPCCall measures one call of a keep-alive client, its
// attempt records included, against an in-process server on loopback.
func BenchmarkGRPCCall(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	labpb.RegisterLabServer(gs, benchLab{})
	go gs.Serve(ln)
	defer gs.Stop()
	s := newGRPCSender((&net.Dialer{}).DialContext, ln.Addr().String(), labpb.Lab_Work_FullMethodName, nil, DefaultConnectTimeout, DefaultResponseTimeout, 1, Limits{})
	defer s.close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var log attemptLog
		for pb.Next() {
			log.attempts, log.done = log.attempts[:0], false
			if err := s.send("bench-id", &log, false); err != nil {
				b.Fatal(err)
			}
		}
	})
}

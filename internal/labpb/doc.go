// Package labpb is the generated code of the lab server's gRPC service,
// closingtime.lab.v1.Lab (lab.proto): `closingtime serve --grpc` serves it
// and `closingtime load --grpc` calls it.
//
// Regenerate it with protoc (Debian's protobuf-compiler) and the plugins
// of the versions go.mod pins:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//	go generate ./internal/labpb
package labpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative lab.proto

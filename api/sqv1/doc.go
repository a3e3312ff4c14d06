// Package sqv1 is the generated Go code of api/sq.proto (protobuf package
// sq.v1): the messages and the gRPC clients and servers of the Topics,
// Groups, Cluster and Messaging services of the SQ control plane
// (docs/architecture.md §5). Regenerate it with `make generate`; never edit it by hand.
package sqv1

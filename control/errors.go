package control

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
)

// ErrorDomain is the ErrorInfo.Domain of SQ's catalog errors.
const ErrorDomain = "seedqueue.io"

// grpcCode maps a catalog code to its gRPC status code.
func grpcCode(c api.Code) codes.Code {
	switch c {
	case api.CodeUnknownTopic, api.CodeUnknownPartition, api.CodeUnknownGroup, api.CodeUnknownTopicID:
		return codes.NotFound
	case api.CodeInvalidTopicName, api.CodeInvalidRequest, api.CodeInvalidConfig,
		api.CodeCorruptBatch, api.CodeUnsupportedVersion:
		return codes.InvalidArgument
	case api.CodeTopicExists:
		return codes.AlreadyExists
	case api.CodeOffsetOutOfRange:
		return codes.OutOfRange
	case api.CodeMessageTooLarge, api.CodeDiskFull, api.CodeThrottled, api.CodeTooManyRequests:
		return codes.ResourceExhausted
	case api.CodeNotLeader, api.CodeShuttingDown, api.CodeStorageError,
		api.CodeLeaderNotAvailable, api.CodeNoQuorum, api.CodeCoordinatorNotAvailable,
		api.CodeNotEnoughReplicas, api.CodeFencedLeaderEpoch, api.CodeUnknownLeaderEpoch:
		return codes.Unavailable
	case api.CodeGroupRebalancing, api.CodeFencedGeneration, api.CodePartitionFailed,
		api.CodeOutOfOrderSequence, api.CodeInvalidProducerEpoch, api.CodeUnknownProducerID:
		return codes.FailedPrecondition
	case api.CodeAuthenticationFailed:
		return codes.Unauthenticated
	case api.CodeAuthorizationFailed:
		return codes.PermissionDenied
	default:
		return codes.Internal
	}
}

// ToStatus converts err into a gRPC status error: context errors become
// Canceled or DeadlineExceeded, anything else a status with the code of its
// catalog entry (an error without one is UNKNOWN, Internal) whose details
// hold a google.rpc.ErrorInfo{Reason: NAME, Domain: ErrorDomain, Metadata:
// {"code": number, "range_start", "range_end", "leader_id", "leader_address"}}. ToStatus(nil) is nil.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	e := api.AsError(err)
	// A status message is a proto3 string: bytes that are not UTF-8 (from
	// a name a client sent) would make the status details unsendable.
	st := status.New(grpcCode(e.Code), strings.ToValidUTF8(e.WireText(), "\uFFFD"))
	md := map[string]string{"code": strconv.Itoa(int(e.Code))}
	if e.HasRange {
		md["range_start"] = strconv.FormatUint(e.RangeStart, 10)
		md["range_end"] = strconv.FormatUint(e.RangeEnd, 10)
	}
	if e.LeaderID != "" {
		md["leader_id"] = e.LeaderID
	}
	if e.LeaderAddr != "" {
		md["leader_address"] = e.LeaderAddr
	}
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: e.Code.String(), Domain: ErrorDomain, Metadata: md}); derr == nil {
		st = d
	}
	return st.Err()
}

// invalid returns an INVALID_REQUEST error (InvalidArgument on the wire).
func invalid(format string, args ...any) error {
	return api.NewError(api.CodeInvalidRequest, format, args...)
}

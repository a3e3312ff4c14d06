package control_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/control"
)

// TestClusterCodesAreUnavailable: LEADER_NOT_AVAILABLE, NO_QUORUM and
// COORDINATOR_NOT_AVAILABLE, all retriable, are gRPC Unavailable with
// their catalog name as the ErrorInfo reason.
func TestClusterCodesAreUnavailable(t *testing.T) {
	for _, c := range []api.Code{api.CodeLeaderNotAvailable, api.CodeNoQuorum, api.CodeCoordinatorNotAvailable} {
		st, _ := status.FromError(control.ToStatus(api.NewError(c, "not now")))
		if st.Code() != codes.Unavailable || errorReason(st) != c.String() {
			t.Errorf("%s: %v (reason %q), want Unavailable %s", c, st.Err(), errorReason(st), c)
		}
	}
}

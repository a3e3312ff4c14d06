package control

import (
	"context"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/internal/audit"
)

// auditedMethods maps each gRPC method that creates, alters or deletes
// something to its audit action and the resource its request names
// (internal/audit).
var auditedMethods = map[string]struct {
	action   string
	resource func(req any) string
}{
	sqv1.Topics_CreateTopic_FullMethodName: {"topic.create", func(r any) string { return r.(*sqv1.CreateTopicRequest).GetName() }},
	sqv1.Topics_AlterTopicConfig_FullMethodName: {"topic.alter", func(r any) string {
		return r.(*sqv1.AlterTopicConfigRequest).GetName()
	}},
	sqv1.Topics_CreatePartitions_FullMethodName: {"partitions.create", func(r any) string {
		return r.(*sqv1.CreatePartitionsRequest).GetName()
	}},
	sqv1.Topics_DeleteTopic_FullMethodName:  {"topic.delete", func(r any) string { return r.(*sqv1.DeleteTopicRequest).GetName() }},
	sqv1.Topics_RestoreTopic_FullMethodName: {"topic.restore", func(r any) string { return r.(*sqv1.RestoreTopicRequest).GetName() }},
	sqv1.Groups_ResetOffsets_FullMethodName: {"group.reset-offsets", func(r any) string {
		x := r.(*sqv1.ResetOffsetsRequest)
		return x.GetGroup() + " " + x.GetTopic()
	}},
	sqv1.Groups_DeleteGroup_FullMethodName: {"group.delete", func(r any) string { return r.(*sqv1.DeleteGroupRequest).GetGroup() }},
	sqv1.Cluster_RemoveNode_FullMethodName: {"cluster.remove-node", func(r any) string { return r.(*sqv1.RemoveNodeRequest).GetNodeId() }},
	sqv1.Cluster_DrainNode_FullMethodName:  {"cluster.drain", func(r any) string { return r.(*sqv1.DrainNodeRequest).GetNodeId() }},
	sqv1.Cluster_UndrainNode_FullMethodName: {"cluster.undrain", func(r any) string {
		return r.(*sqv1.UndrainNodeRequest).GetNodeId()
	}},
	sqv1.Quotas_SetQuota_FullMethodName:    {"quota.set", func(r any) string { return quotaResource(r.(*sqv1.SetQuotaRequest)) }},
	sqv1.Quotas_RemoveQuota_FullMethodName: {"quota.remove", func(r any) string { return quotaResource(r.(*sqv1.RemoveQuotaRequest)) }},
	sqv1.Acls_CreateAcls_FullMethodName:    {"acl.create", func(r any) string { return aclsText(r.(*sqv1.CreateAclsRequest).GetAcls()) }},
	sqv1.Acls_DeleteAcls_FullMethodName:    {"acl.delete", func(r any) string { return filtersText(r.(*sqv1.DeleteAclsRequest).GetFilters()) }},
	sqv1.Users_CreateUser_FullMethodName:   {"user.create", func(r any) string { return r.(*sqv1.CreateUserRequest).GetName() }},
	sqv1.Users_DeleteUser_FullMethodName:   {"user.delete", func(r any) string { return r.(*sqv1.DeleteUserRequest).GetName() }},
}

// auditUnary writes the audit line of each call of auditedMethods once
// its handler returned. A group call forwarded by another node is
// audited where the client sent it, not again at its coordinator.
func (s *Server) auditUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	m, ok := auditedMethods[info.FullMethod]
	if !ok || headerSet(ctx, groupForwardedHeader) {
		return resp, err
	}
	e := audit.Event{Plane: "grpc", Action: m.action, Principal: requestPrincipal(ctx), Err: err}
	if _, isStatus := status.FromError(err); err != nil && isStatus {
		e.Result = statusResult(err)
	}
	func() {
		defer func() { _ = recover() }() // a request of another type: no resource
		e.Resource = m.resource(req)
	}()
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		e.Remote = p.Addr.String()
	}
	audit.Log(s.opts.Logger, e)
	return resp, err
}

// statusResult is the audit result of a call's error: the SQ code of its
// ErrorInfo detail (ToStatus) and the message, else the gRPC code and
// the message.
func statusResult(err error) string {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return info.GetReason() + ": " + st.Message()
		}
	}
	return st.Code().String() + ": " + st.Message()
}

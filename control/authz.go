package control

import (
	"context"
	"strings"

	"google.golang.org/grpc"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/internal/acl"
)

// grpcRule is the authorization of one sq.v1 method (Kafka's mapping of
// requests to operations and resources; docs/security.md, "What each
// request needs"): checks lists what a request message needs, and
// filter, when set, removes from a listing what the principal may not
// describe.
type grpcRule struct {
	checks func(req any) []acl.Check
	filter func(a *acl.Authorizer, principal string, resp any)
}

func topicCheck(op acl.Operation, topic string) acl.Check {
	return acl.Check{Op: op, Resource: acl.TopicResource(topic)}
}

func groupCheck(op acl.Operation, group string) acl.Check {
	return acl.Check{Op: op, Resource: acl.GroupResource(group)}
}

func clusterCheck(op acl.Operation) acl.Check {
	return acl.Check{Op: op, Resource: acl.ClusterResource()}
}

// on is a rule of one check built from the request message.
func on[T any](f func(T) acl.Check) grpcRule {
	return grpcRule{checks: func(r any) []acl.Check { return []acl.Check{f(r.(T))} }}
}

// onCluster is a rule of op on the cluster.
func onCluster(op acl.Operation) grpcRule {
	return grpcRule{checks: func(any) []acl.Check { return []acl.Check{clusterCheck(op)} }}
}

// offsetChecks are the checks of a commit: Read on the group and on each
// topic committed to (Kafka's OffsetCommit).
func offsetChecks(group string, offsets []*sqv1.OffsetEntry) []acl.Check {
	checks := []acl.Check{groupCheck(acl.Read, group)}
	seen := map[string]bool{}
	for _, o := range offsets {
		if !seen[o.GetTopic()] {
			seen[o.GetTopic()] = true
			checks = append(checks, topicCheck(acl.Read, o.GetTopic()))
		}
	}
	return checks
}

// grpcRules maps every sq.v1 method to its authorization. A method
// missing here is refused when authorization is on (and a test fails).
var grpcRules = map[string]grpcRule{
	sqv1.Topics_CreateTopic_FullMethodName:      on(func(r *sqv1.CreateTopicRequest) acl.Check { return topicCheck(acl.Create, r.GetName()) }),
	sqv1.Topics_AlterTopicConfig_FullMethodName: on(func(r *sqv1.AlterTopicConfigRequest) acl.Check { return topicCheck(acl.Alter, r.GetName()) }),
	sqv1.Topics_CreatePartitions_FullMethodName: on(func(r *sqv1.CreatePartitionsRequest) acl.Check { return topicCheck(acl.Alter, r.GetName()) }),
	sqv1.Topics_DeleteTopic_FullMethodName:      on(func(r *sqv1.DeleteTopicRequest) acl.Check { return topicCheck(acl.Delete, r.GetName()) }),
	sqv1.Topics_RestoreTopic_FullMethodName:     on(func(r *sqv1.RestoreTopicRequest) acl.Check { return topicCheck(acl.Create, r.GetName()) }),
	sqv1.Topics_ListTopics_FullMethodName:       {filter: filterTopics},
	sqv1.Topics_DescribeTopic_FullMethodName:    on(func(r *sqv1.DescribeTopicRequest) acl.Check { return topicCheck(acl.Describe, r.GetName()) }),

	sqv1.Groups_ListGroups_FullMethodName:    {filter: filterGroups},
	sqv1.Groups_DescribeGroup_FullMethodName: on(func(r *sqv1.DescribeGroupRequest) acl.Check { return groupCheck(acl.Describe, r.GetGroup()) }),
	sqv1.Groups_ResetOffsets_FullMethodName: {checks: func(r any) []acl.Check {
		x := r.(*sqv1.ResetOffsetsRequest)
		return []acl.Check{groupCheck(acl.Read, x.GetGroup()), topicCheck(acl.Read, x.GetTopic())}
	}},
	sqv1.Groups_DeleteGroup_FullMethodName: on(func(r *sqv1.DeleteGroupRequest) acl.Check { return groupCheck(acl.Delete, r.GetGroup()) }),
	sqv1.Groups_JoinGroup_FullMethodName: {checks: func(r any) []acl.Check {
		x := r.(*sqv1.JoinGroupRequest)
		checks := []acl.Check{groupCheck(acl.Read, x.GetGroup())}
		for _, t := range x.GetTopics() {
			checks = append(checks, topicCheck(acl.Describe, t))
		}
		return checks
	}},
	sqv1.Groups_Heartbeat_FullMethodName:  on(func(r *sqv1.HeartbeatRequest) acl.Check { return groupCheck(acl.Read, r.GetGroup()) }),
	sqv1.Groups_LeaveGroup_FullMethodName: on(func(r *sqv1.LeaveGroupRequest) acl.Check { return groupCheck(acl.Read, r.GetGroup()) }),
	sqv1.Groups_CommitGroupOffsets_FullMethodName: {checks: func(r any) []acl.Check {
		x := r.(*sqv1.CommitGroupOffsetsRequest)
		return offsetChecks(x.GetGroup(), x.GetOffsets())
	}},

	sqv1.Cluster_NodeInfo_FullMethodName:   onCluster(acl.Describe),
	sqv1.Cluster_Members_FullMethodName:    onCluster(acl.Describe),
	sqv1.Cluster_Info_FullMethodName:       onCluster(acl.Describe),
	sqv1.Cluster_RemoveNode_FullMethodName: onCluster(acl.Alter),
	// Node-to-node calls: nodes are super users (docs/security.md).
	sqv1.Cluster_Join_FullMethodName:    onCluster(acl.ClusterAction),
	sqv1.Cluster_Propose_FullMethodName: onCluster(acl.ClusterAction),

	sqv1.Messaging_Publish_FullMethodName:       on(func(r *sqv1.PublishRequest) acl.Check { return topicCheck(acl.Write, r.GetTopic()) }),
	sqv1.Messaging_PublishStream_FullMethodName: on(func(r *sqv1.PublishRequest) acl.Check { return topicCheck(acl.Write, r.GetTopic()) }),
	sqv1.Messaging_Subscribe_FullMethodName: {checks: func(r any) []acl.Check {
		x := r.(*sqv1.SubscribeRequest)
		checks := []acl.Check{topicCheck(acl.Read, x.GetTopic())}
		if x.GetGroup() != "" {
			checks = append(checks, groupCheck(acl.Describe, x.GetGroup()))
		}
		return checks
	}},
	sqv1.Messaging_CommitOffsets_FullMethodName: {checks: func(r any) []acl.Check {
		x := r.(*sqv1.CommitOffsetsRequest)
		return offsetChecks(x.GetGroup(), x.GetOffsets())
	}},
	sqv1.Messaging_FetchOffsets_FullMethodName: {
		checks: func(r any) []acl.Check {
			x := r.(*sqv1.FetchOffsetsRequest)
			checks := []acl.Check{groupCheck(acl.Describe, x.GetGroup())}
			if x.GetTopic() != "" {
				checks = append(checks, topicCheck(acl.Describe, x.GetTopic()))
			}
			return checks
		},
		filter: filterOffsets,
	},
	// An idempotent producer may write to some topic (KIP-679).
	sqv1.Messaging_InitProducerId_FullMethodName: {checks: func(any) []acl.Check {
		return []acl.Check{{Op: acl.Write, Resource: acl.Resource{Type: acl.Topic}, AnyOfType: true}}
	}},

	sqv1.Acls_CreateAcls_FullMethodName: onCluster(acl.Alter),
	sqv1.Acls_ListAcls_FullMethodName:   onCluster(acl.Describe),
	sqv1.Acls_DeleteAcls_FullMethodName: onCluster(acl.Alter),

	// Draining moves leaderships: Kafka's controlled shutdown and
	// reassignments need alter on the cluster.
	sqv1.Cluster_DrainNode_FullMethodName:   onCluster(acl.Alter),
	sqv1.Cluster_UndrainNode_FullMethodName: onCluster(acl.Alter),

	// Client quotas: Kafka's AlterClientQuotas needs alter-configs and
	// DescribeClientQuotas describe-configs on the cluster (KIP-546); SQ
	// has no *-configs operations, so alter and describe.
	sqv1.Quotas_SetQuota_FullMethodName:    onCluster(acl.Alter),
	sqv1.Quotas_RemoveQuota_FullMethodName: onCluster(acl.Alter),
	sqv1.Quotas_ListQuotas_FullMethodName:  onCluster(acl.Describe),

	// Users: Kafka's AlterUserScramCredentials needs alter and
	// DescribeUserScramCredentials describe on the cluster (KIP-554).
	// Authenticate is how a client gets an identity: open, as the
	// data plane's SASL exchange.
	sqv1.Users_CreateUser_FullMethodName:   onCluster(acl.Alter),
	sqv1.Users_DeleteUser_FullMethodName:   onCluster(acl.Alter),
	sqv1.Users_ListUsers_FullMethodName:    onCluster(acl.Describe),
	sqv1.Users_Authenticate_FullMethodName: {},
}

func filterTopics(a *acl.Authorizer, p string, resp any) {
	r := resp.(*sqv1.ListTopicsResponse)
	kept := r.Topics[:0]
	for _, t := range r.Topics {
		if a.Allowed(p, acl.Describe, acl.TopicResource(t.GetName())) {
			kept = append(kept, t)
		}
	}
	r.Topics = kept
}

// filterGroups keeps every group for a principal that may describe the
// cluster, else the groups it may describe (Kafka's ListGroups).
func filterGroups(a *acl.Authorizer, p string, resp any) {
	if a.Allowed(p, acl.Describe, acl.ClusterResource()) {
		return
	}
	r := resp.(*sqv1.ListGroupsResponse)
	kept := r.Groups[:0]
	for _, g := range r.Groups {
		if a.Allowed(p, acl.Describe, acl.GroupResource(g.GetGroup())) {
			kept = append(kept, g)
		}
	}
	r.Groups = kept
}

// filterOffsets keeps the offsets of the topics the principal may
// describe (Kafka's OffsetFetch).
func filterOffsets(a *acl.Authorizer, p string, resp any) {
	r := resp.(*sqv1.FetchOffsetsResponse)
	kept := r.Offsets[:0]
	for _, o := range r.Offsets {
		if a.Allowed(p, acl.Describe, acl.TopicResource(o.GetTopic())) {
			kept = append(kept, o)
		}
	}
	r.Offsets = kept
}

// sqService reports whether method belongs to an sq.v1 service (health
// and reflection stay open, as /healthz).
func sqService(method string) bool { return strings.HasPrefix(method, "/sq.v1.") }

// authorizeCall returns the refusal of a call of method with request
// message req by principal p: nil when allowed or authorization is off;
// AUTHORIZATION_FAILED for a method without a rule.
func (s *Server) authorizeCall(method, p string, req any) error {
	a := s.opts.Authorizer
	if !a.Enabled() || !sqService(method) {
		return nil
	}
	rule, ok := grpcRules[method]
	if !ok {
		return api.NewError(api.CodeAuthorizationFailed, "%s has no authorization rule", method)
	}
	if rule.checks == nil {
		return nil
	}
	return a.CheckAll(p, rule.checks(req))
}

// authorizeUnary refuses a unary call its principal may not make and
// filters listings (grpcRules).
func (s *Server) authorizeUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !s.opts.Authorizer.Enabled() {
		return handler(ctx, req)
	}
	p := requestPrincipal(ctx)
	if err := s.authorizeCall(info.FullMethod, p, req); err != nil {
		return nil, err
	}
	resp, err := handler(ctx, req)
	if rule := grpcRules[info.FullMethod]; err == nil && rule.filter != nil && resp != nil {
		rule.filter(s.opts.Authorizer, p, resp)
	}
	return resp, err
}

// authorizeStream checks every message a streaming call receives
// (Subscribe's request, each PublishStream request).
func (s *Server) authorizeStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !s.opts.Authorizer.Enabled() || !sqService(info.FullMethod) {
		return handler(srv, ss)
	}
	return handler(srv, &authorizedStream{ServerStream: ss, s: s, method: info.FullMethod, principal: requestPrincipal(ss.Context())})
}

// authorizedStream checks each received message of a stream.
type authorizedStream struct {
	grpc.ServerStream
	s         *Server
	method    string
	principal string
}

// RecvMsg receives m and refuses it when the principal may not send it.
func (a *authorizedStream) RecvMsg(m any) error {
	if err := a.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return a.s.authorizeCall(a.method, a.principal, m)
}

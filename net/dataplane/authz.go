package dataplane

import (
	"strings"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/acl"
)

// requestRule is the authorization of one request kind (Kafka's mapping
// of requests to operations and resources; docs/security.md, "What each
// request needs"): the checks of a request, nil for a request that needs
// none (the handshake; a subscription's credit and unsubscribe, which
// act on a subscription authorized when made; a listing, filtered
// instead).
type requestRule func(req request) []acl.Check

func topicCheck(op acl.Operation, topic string) acl.Check {
	return acl.Check{Op: op, Resource: acl.TopicResource(topic)}
}

func groupCheck(op acl.Operation, group string) acl.Check {
	return acl.Check{Op: op, Resource: acl.GroupResource(group)}
}

// onTopic checks op on the request's topic (req.topic).
func onTopic(op acl.Operation) requestRule {
	return func(req request) []acl.Check { return []acl.Check{topicCheck(op, req.topic)} }
}

// onNamed checks op on the topic the request names (req.name).
func onNamed(op acl.Operation) requestRule {
	return func(req request) []acl.Check { return []acl.Check{topicCheck(op, req.name)} }
}

// onGroup checks op on a group frame's group.
func onGroup(op acl.Operation) requestRule {
	return func(req request) []acl.Check { return []acl.Check{groupCheck(op, req.ext.(*groupReq).group)} }
}

// requestRules maps every request of the data plane to its
// authorization. A request kind missing here is refused when
// authorization is on (and a test fails).
var requestRules = map[api.Frame_Which]requestRule{
	api.Frame_Which_handshakeRequest: nil,
	// The SASL exchange is how a connection gets its principal.
	api.Frame_Which_saslAuthenticateRequest: nil,
	api.Frame_Which_metadataRequest: func(req request) []acl.Check {
		// Named topics must each be describable; all topics: filtered.
		var checks []acl.Check
		for _, t := range req.topics {
			checks = append(checks, topicCheck(acl.Describe, t))
		}
		return checks
	},
	api.Frame_Which_createTopicRequest:   onNamed(acl.Create),
	api.Frame_Which_describeTopicRequest: onNamed(acl.Describe),
	api.Frame_Which_listTopicsRequest:    nil, // filtered
	api.Frame_Which_publishRequest:       onTopic(acl.Write),
	// Each entry is checked as a publish of its own (publishBatches), so
	// that a refused topic fails its entries only; this rule is the
	// whole request's, Write on every topic it names.
	api.Frame_Which_publishBatchesRequest: func(req request) []acl.Check {
		var checks []acl.Check
		seen := map[string]bool{}
		for _, e := range req.entries {
			if !seen[e.topic] {
				seen[e.topic] = true
				checks = append(checks, topicCheck(acl.Write, e.topic))
			}
		}
		return checks
	},
	api.Frame_Which_fetchRequest:            onTopic(acl.Read),
	api.Frame_Which_commitOffsetsRequest:    commitChecks,
	api.Frame_Which_fetchOffsetsRequest:     fetchOffsetsChecks,
	api.Frame_Which_deleteTopicRequest:      onNamed(acl.Delete),
	api.Frame_Which_listOffsetsRequest:      onTopic(acl.Describe),
	api.Frame_Which_createPartitionsRequest: onNamed(acl.Alter),
	api.Frame_Which_joinGroupRequest: func(req request) []acl.Check {
		g := req.ext.(*groupReq)
		checks := []acl.Check{groupCheck(acl.Read, g.group)}
		for _, t := range g.topics {
			checks = append(checks, topicCheck(acl.Describe, t))
		}
		return checks
	},
	api.Frame_Which_heartbeatRequest:     onGroup(acl.Read),
	api.Frame_Which_leaveGroupRequest:    onGroup(acl.Read),
	api.Frame_Which_listGroupsRequest:    nil, // filtered
	api.Frame_Which_describeGroupRequest: onGroup(acl.Describe),
	api.Frame_Which_resetOffsetsRequest: func(req request) []acl.Check {
		g := req.ext.(*groupReq)
		return []acl.Check{groupCheck(acl.Read, g.group), topicCheck(acl.Read, g.topic)}
	},
	api.Frame_Which_deleteGroupRequest: onGroup(acl.Delete),
	api.Frame_Which_subscribeRequest: func(req request) []acl.Check {
		return []acl.Check{topicCheck(acl.Read, req.ext.(*subReq).topic)}
	},
	api.Frame_Which_grantCreditRequest: nil,
	api.Frame_Which_unsubscribeRequest: nil,
	// Node-to-node requests: nodes are super users (docs/security.md).
	api.Frame_Which_replicaFetchRequest:         onCluster(acl.ClusterAction),
	api.Frame_Which_offsetForLeaderEpochRequest: onCluster(acl.ClusterAction),
	// An idempotent producer may write to some topic (KIP-679).
	api.Frame_Which_initProducerIdRequest: func(request) []acl.Check {
		return []acl.Check{{Op: acl.Write, Resource: acl.Resource{Type: acl.Topic}, AnyOfType: true}}
	},
}

func onCluster(op acl.Operation) requestRule {
	return func(request) []acl.Check { return []acl.Check{{Op: op, Resource: acl.ClusterResource()}} }
}

// commitChecks: Read on the group and on each topic committed to
// (Kafka's OffsetCommit).
func commitChecks(req request) []acl.Check {
	checks := []acl.Check{groupCheck(acl.Read, req.group)}
	seen := map[string]bool{}
	for _, c := range req.commits {
		if !seen[c.Topic] {
			seen[c.Topic] = true
			checks = append(checks, topicCheck(acl.Read, c.Topic))
		}
	}
	return checks
}

// fetchOffsetsChecks: Describe on the group and the topic (Kafka's
// OffsetFetch).
func fetchOffsetsChecks(req request) []acl.Check {
	checks := []acl.Check{groupCheck(acl.Describe, req.group)}
	if req.topic != "" {
		checks = append(checks, topicCheck(acl.Describe, req.topic))
	}
	return checks
}

// authorize returns the refusal of req by the connection's principal:
// nil when allowed or authorization is off; AUTHORIZATION_FAILED for a
// request kind without a rule. A frame member that is not a request (a
// response sent by a client) passes, to be answered INVALID_REQUEST.
func (c *conn) authorize(req request) error {
	a := c.srv.opts.Authorizer
	if !a.Enabled() {
		return nil
	}
	rule, ok := requestRules[req.kind]
	if !ok {
		if !strings.HasSuffix(req.kind.String(), "Request") {
			return nil
		}
		return api.NewError(api.CodeAuthorizationFailed, "request %v has no authorization rule", req.kind)
	}
	if rule == nil {
		return nil
	}
	return a.CheckAll(connPrincipal(c), rule(req))
}

// describableTopics returns the topics of ts the connection's principal
// may describe (ts itself when authorization is off).
func (c *conn) describableTopics(ts []engine.TopicInfo) []engine.TopicInfo {
	a := c.srv.opts.Authorizer
	if !a.Enabled() {
		return ts
	}
	p := connPrincipal(c)
	var out []engine.TopicInfo
	for _, t := range ts {
		if a.Allowed(p, acl.Describe, acl.TopicResource(t.Name)) {
			out = append(out, t)
		}
	}
	return out
}

// describableGroups returns every group for a principal that may
// describe the cluster, else the groups it may describe (Kafka's
// ListGroups).
func (c *conn) describableGroups(gs []engine.GroupSummary) []engine.GroupSummary {
	a := c.srv.opts.Authorizer
	if !a.Enabled() {
		return gs
	}
	p := connPrincipal(c)
	if a.Allowed(p, acl.Describe, acl.ClusterResource()) {
		return gs
	}
	var out []engine.GroupSummary
	for _, g := range gs {
		if a.Allowed(p, acl.Describe, acl.GroupResource(g.Group)) {
			out = append(out, g)
		}
	}
	return out
}

// describableOffsets returns the offsets of os whose topic the
// connection's principal may describe (Kafka's OffsetFetch; os itself
// when authorization is off).
func (c *conn) describableOffsets(os []engine.OffsetCommit) []engine.OffsetCommit {
	a := c.srv.opts.Authorizer
	if !a.Enabled() {
		return os
	}
	p := connPrincipal(c)
	var out []engine.OffsetCommit
	for _, o := range os {
		if a.Allowed(p, acl.Describe, acl.TopicResource(o.Topic)) {
			out = append(out, o)
		}
	}
	return out
}

// auditRefusal writes the audit line of an audited request (a create,
// alter or delete) that authorization refused, as its handler would
// have with the refusal.
func (c *conn) auditRefusal(req request, err error) {
	switch req.kind {
	case api.Frame_Which_createTopicRequest:
		c.audit("topic.create", req.name, err)
	case api.Frame_Which_deleteTopicRequest:
		c.audit("topic.delete", req.name, err)
	case api.Frame_Which_createPartitionsRequest:
		c.audit("partitions.create", req.name, err)
	case api.Frame_Which_deleteGroupRequest:
		c.audit("group.delete", req.ext.(*groupReq).group, err)
	case api.Frame_Which_resetOffsetsRequest:
		g := req.ext.(*groupReq)
		c.audit("group.reset-offsets", g.group+" "+g.topic, err)
	}
}

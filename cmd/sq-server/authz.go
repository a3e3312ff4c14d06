package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seedqueue/sq/internal/acl"
	"github.com/seedqueue/sq/internal/tlsconf"
)

// validateAuthz checks --super-users, and that a node joining a cluster
// with --authorization uses mutual TLS: nodes call each other as
// principals too (replica fetch, Join, Propose, forwarded group calls),
// and only a certificate makes a node a principal other than
// User:ANONYMOUS.
func (c *config) validateAuthz() []error {
	var errs []error
	if _, err := acl.ParseSuperUsers(c.SuperUsers); err != nil {
		errs = append(errs, fmt.Errorf("--super-users: %w", err))
	}
	if c.Authorization && len(c.seeds()) > 0 && c.TLSClientCA == "" {
		errs = append(errs, errors.New("--authorization with --seeds needs --tls-client-ca: nodes authenticate to each other by certificate, and their certificate subjects are super users"))
	}
	return errs
}

// newAuthorizer builds the authorizer both planes check requests with
// (nil without --authorization): the super users of --super-users plus
// this node's own certificate subject (tlsr's leaf, as loaded at start),
// refusals counted in sq_authorization_denied_total{operation,
// resource_type}, which the caller registers (denied).
func (c *config) newAuthorizer(tlsr *tlsconf.Reloader, log *slog.Logger) (a *acl.Authorizer, denied *prometheus.CounterVec, err error) {
	if !c.Authorization {
		return nil, nil, nil
	}
	supers, err := acl.ParseSuperUsers(c.SuperUsers)
	if err != nil {
		return nil, nil, fmt.Errorf("--super-users: %w", err)
	}
	if tlsr != nil {
		if leaf := tlsr.Certificate().Leaf; leaf != nil {
			supers = append(supers, acl.PrincipalPrefix+leaf.Subject.String())
		}
	}
	denied = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sq_authorization_denied_total",
		Help: "Requests refused with AUTHORIZATION_FAILED (both planes), per operation and resource type (topic, group, cluster)."},
		[]string{"operation", "resource_type"})
	a, err = acl.New(acl.Options{Enabled: true, SuperUsers: supers, OnDeny: func(op acl.Operation, t acl.ResourceType) {
		denied.WithLabelValues(string(op), string(t)).Inc()
	}})
	if err != nil {
		return nil, nil, err
	}
	log.Info("authorization on: requests need an ACL", "super_users", supers)
	if !c.clustered() {
		log.Warn("--authorization without --grpc-host: no ACL can be created (sq acl needs the gRPC plane); only --super-users are allowed")
	}
	if tlsr == nil || !tlsr.MutualTLS() {
		log.Warn("--authorization without mutual TLS (--tls-client-ca): every client is User:ANONYMOUS unless it authenticates otherwise; ACLs for User:ANONYMOUS or User:* apply to all of them")
	}
	return a, denied, nil
}

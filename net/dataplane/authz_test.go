package dataplane

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/acl"
	"github.com/seedqueue/sq/internal/tlstest"
)

// authzEnv is a data plane under mutual TLS with authorization on: the
// certificate of CN=admin is a super user, CN=alice and CN=bob are
// clients without ACLs until a test sets them.
type authzEnv struct {
	t     *testing.T
	addr  string
	authz *acl.Authorizer
	ca    *tlstest.CA
	pool  *x509.CertPool
	logs  *logBuffer
}

const (
	alice = "User:CN=alice"
	admin = "User:CN=admin"
)

func startAuthzServer(t *testing.T) *authzEnv {
	t.Helper()
	ca := tlstest.NewCA(t, "sq-test-ca")
	server := ca.Issue(t, tlstest.Options{CommonName: "localhost"})
	a, err := acl.New(acl.Options{Enabled: true, SuperUsers: []string{admin}})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	srv, err := New(openEngine(t), Options{NodeID: "node-1", ServerVersion: "test", Authorizer: a,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{server.TLS(t)}, ClientCAs: ca.Pool(),
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(tls.NewListener(ln, cfg)) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	return &authzEnv{t: t, addr: ln.Addr().String(), authz: a, ca: ca, pool: ca.Pool(), logs: logs}
}

// client connects with a certificate of common name cn and completes the
// handshake.
func (e *authzEnv) client(cn string) *testClient {
	e.t.Helper()
	leaf := e.ca.Issue(e.t, tlstest.Options{CommonName: cn})
	nc, err := tls.Dial("tcp", e.addr, &tls.Config{RootCAs: e.pool, ServerName: "localhost",
		Certificates: []tls.Certificate{leaf.TLS(e.t)}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { nc.Close() })
	c := &testClient{t: e.t, nc: nc, fr: api.NewFrameReader(nc, 16<<20, 64<<20), next: 1}
	c.handshake(api.ProtocolVersion)
	return c
}

// authzRefused reports whether r is the refusal of authorization: an
// errorResponse, or a publish response (or an entry of a publishBatches
// response), with AUTHORIZATION_FAILED.
func authzRefused(r reply) bool {
	switch r.f.Which() {
	case api.Frame_Which_errorResponse:
		w, err := r.f.ErrorResponse()
		return err == nil && wireErr(w, nil) == api.CodeAuthorizationFailed
	case api.Frame_Which_publishResponse:
		p, err := r.f.PublishResponse()
		return err == nil && wireErr(p.Error()) == api.CodeAuthorizationFailed
	case api.Frame_Which_publishBatchesResponse:
		// Refused when an entry was.
		p, err := r.f.PublishBatchesResponse()
		if err != nil {
			return false
		}
		l, err := p.Results()
		if err != nil {
			return false
		}
		for i := 0; i < l.Len(); i++ {
			if wireErr(l.At(i).Error()) == api.CodeAuthorizationFailed {
				return true
			}
		}
	}
	return false
}

// authorized issues one request and reports whether it passed
// authorization (it may still fail for another reason).
func authorized(build func(api.Frame) error, tail []byte) func(c *testClient) bool {
	return func(c *testClient) bool { return !authzRefused(c.call(build, tail)) }
}

func joinReq(group string, topics ...string) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewJoinGroupRequest()
		if err != nil {
			return err
		}
		r.SetSessionTimeoutMs(10000)
		l, err := r.NewTopics(int32(len(topics)))
		if err != nil {
			return err
		}
		for i, t := range topics {
			_ = l.Set(i, t)
		}
		return r.SetGroup(group)
	}
}

func commitReq(group, topic string) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewCommitOffsetsRequest()
		if err != nil {
			return err
		}
		r.SetGeneration(-1)
		l, err := r.NewOffsets(1)
		if err != nil {
			return err
		}
		_ = l.At(0).SetTopic(topic)
		return r.SetGroup(group)
	}
}

// visibleTopic reports whether a listing built by build shows topic "t" (or
// group "g" for a group listing).
func visibleTopic(build func(api.Frame) error) func(c *testClient) bool {
	return func(c *testClient) bool {
		r := c.call(build, nil)
		var names []string
		switch r.f.Which() {
		case api.Frame_Which_listTopicsResponse:
			lt, _ := r.f.ListTopicsResponse()
			l, _ := lt.Topics()
			for i := range l.Len() {
				n, _ := l.At(i).Name()
				names = append(names, n)
			}
		case api.Frame_Which_metadataResponse:
			m, _ := r.f.MetadataResponse()
			l, _ := m.Topics()
			for i := range l.Len() {
				n, _ := l.At(i).Name()
				names = append(names, n)
			}
		case api.Frame_Which_listGroupsResponse:
			lg, _ := r.f.ListGroupsResponse()
			l, _ := lg.Groups()
			for i := range l.Len() {
				n, _ := l.At(i).Group()
				names = append(names, n)
			}
		}
		for _, n := range names {
			if n == "t" || n == "g" {
				return true
			}
		}
		return false
	}
}

// dataplaneAuthzRow is one data-plane request: do issues it as the
// client it is given and reports whether it was authorized (for a
// listing: whether it shows the resource). allow are ACLs that let
// alice through, deny one that beats them; open rows need no ACL.
type dataplaneAuthzRow struct {
	kind  api.Frame_Which
	do    func(c *testClient) bool
	allow []string
	deny  string
	open  bool
}

// authzTopicID is the topic id of the replica requests of the table.
var authzTopicID = api.TopicID{1}

// dataplaneAuthzRows covers every data-plane request (checked by the
// test).
var dataplaneAuthzRows = []dataplaneAuthzRow{
	{kind: api.Frame_Which_handshakeRequest, open: true, do: authorized(handshakeReq, nil)},
	// No user store here: the exchange fails with AUTHENTICATION_FAILED,
	// never AUTHORIZATION_FAILED.
	{kind: api.Frame_Which_saslAuthenticateRequest, open: true, do: authorized(saslReq("SCRAM-SHA-256", []byte("n,,n=alice,r=abc")), nil)},
	{kind: api.Frame_Which_metadataRequest, do: authorized(metadataReq("t"), nil),
		allow: []string{"User:CN=alice allow describe topic:t"}, deny: "User:CN=alice deny describe topic:*"},
	{kind: api.Frame_Which_metadataRequest, do: visibleTopic(metadataReq()),
		allow: []string{"User:CN=alice allow read topic:t"}, deny: "User:CN=alice deny describe topic:t"},
	{kind: api.Frame_Which_createTopicRequest, do: authorized(createTopicReq("new", 1), nil),
		allow: []string{"User:CN=alice allow create topic:new"}, deny: "User:CN=alice deny create topic:n*"},
	{kind: api.Frame_Which_createTopicRequest, do: authorized(createTopicReq("new2", 1), nil),
		allow: []string{"User:CN=alice allow create cluster"}, deny: "User:CN=alice deny all topic:new2"},
	{kind: api.Frame_Which_describeTopicRequest, do: authorized(describeTopicReq("t"), nil),
		allow: []string{"User:CN=alice allow describe topic:t"}, deny: "User:* deny describe topic:t"},
	{kind: api.Frame_Which_listTopicsRequest, do: visibleTopic(listTopicsReq),
		allow: []string{"User:CN=alice allow describe topic:t*"}, deny: "User:CN=alice deny all topic:t"},
	{kind: api.Frame_Which_publishRequest, do: func(c *testClient) bool {
		b := buildBatch(c.t, []byte("v"))
		return authorized(publishReq("t", 0, len(b)), b)(c)
	},
		allow: []string{"User:CN=alice allow write topic:t"}, deny: "User:CN=alice deny write topic:t"},
	{kind: api.Frame_Which_publishBatchesRequest, do: func(c *testClient) bool {
		b := buildBatch(c.t, []byte("v"))
		return authorized(publishBatchesReq(api.Acks_all, batchEntry{"t", 0, b, false}), b)(c)
	},
		allow: []string{"User:CN=alice allow write topic:t"}, deny: "User:CN=alice deny write topic:t"},
	{kind: api.Frame_Which_fetchRequest, do: authorized(fetchReq("t", 0, 0, 1<<20, 0), nil),
		allow: []string{"User:CN=alice allow read topic:t"}, deny: "User:CN=alice deny read topic:t"},
	{kind: api.Frame_Which_commitOffsetsRequest, do: authorized(commitReq("g", "t"), nil),
		allow: []string{"User:CN=alice allow read group:g", "User:CN=alice allow read topic:t"}, deny: "User:CN=alice deny read topic:t"},
	{kind: api.Frame_Which_fetchOffsetsRequest, do: authorized(func(f api.Frame) error {
		r, err := f.NewFetchOffsetsRequest()
		if err != nil {
			return err
		}
		_ = r.SetTopic("t")
		return r.SetGroup("g")
	}, nil), allow: []string{"User:CN=alice allow describe group:g", "User:CN=alice allow describe topic:t"}, deny: "User:CN=alice deny describe group:g"},
	{kind: api.Frame_Which_deleteTopicRequest, do: authorized(deleteTopicReq("gone"), nil),
		allow: []string{"User:CN=alice allow delete topic:gone"}, deny: "User:CN=alice deny delete topic:gone"},
	{kind: api.Frame_Which_listOffsetsRequest, do: authorized(listOffsetsReq("t", 0, 0), nil),
		allow: []string{"User:CN=alice allow describe topic:t"}, deny: "User:CN=alice deny describe topic:t"},
	{kind: api.Frame_Which_joinGroupRequest, do: authorized(joinReq("g", "t"), nil),
		allow: []string{"User:CN=alice allow read group:g", "User:CN=alice allow describe topic:t"}, deny: "User:CN=alice deny read group:*"},
	{kind: api.Frame_Which_heartbeatRequest, do: authorized(func(f api.Frame) error {
		r, err := f.NewHeartbeatRequest()
		if err != nil {
			return err
		}
		return r.SetGroup("g")
	}, nil), allow: []string{"User:CN=alice allow read group:g"}, deny: "User:CN=alice deny read group:g"},
	{kind: api.Frame_Which_leaveGroupRequest, do: authorized(func(f api.Frame) error {
		r, err := f.NewLeaveGroupRequest()
		if err != nil {
			return err
		}
		return r.SetGroup("g")
	}, nil), allow: []string{"User:CN=alice allow read group:g"}, deny: "User:CN=alice deny read group:g"},
	{kind: api.Frame_Which_listGroupsRequest, do: visibleTopic(func(f api.Frame) error {
		_, err := f.NewListGroupsRequest()
		return err
	}), allow: []string{"User:CN=alice allow describe group:g"}, deny: "User:CN=alice deny describe group:g"},
	{kind: api.Frame_Which_describeGroupRequest, do: authorized(func(f api.Frame) error {
		r, err := f.NewDescribeGroupRequest()
		if err != nil {
			return err
		}
		return r.SetGroup("g")
	}, nil), allow: []string{"User:CN=alice allow describe group:g"}, deny: "User:CN=alice deny describe group:g"},
	{kind: api.Frame_Which_resetOffsetsRequest, do: authorized(func(f api.Frame) error {
		r, err := f.NewResetOffsetsRequest()
		if err != nil {
			return err
		}
		if err := r.SetTopic("t"); err != nil {
			return err
		}
		return r.SetGroup("g")
	}, nil), allow: []string{"User:CN=alice allow read group:g", "User:CN=alice allow read topic:t"}, deny: "User:CN=alice deny read group:g"},
	{kind: api.Frame_Which_deleteGroupRequest, do: authorized(func(f api.Frame) error {
		r, err := f.NewDeleteGroupRequest()
		if err != nil {
			return err
		}
		return r.SetGroup("nogroup")
	}, nil), allow: []string{"User:CN=alice allow delete group:nogroup"}, deny: "User:CN=alice deny delete group:nogroup"},
	{kind: api.Frame_Which_subscribeRequest, do: authorized(subscribeReq("nosuchtopic", 0, 0, 1<<20), nil),
		allow: []string{"User:CN=alice allow read topic:nosuchtopic"}, deny: "User:CN=alice deny read topic:nosuchtopic"},
	// Credit and unsubscribe act on the connection's own
	// subscription, authorized when it was made.
	{kind: api.Frame_Which_grantCreditRequest, open: true, do: func(c *testClient) bool {
		c.send(grantReq(12345, 1), nil) // no answer: an unknown subscription is ignored
		return authorized(unsubscribeReq(12345), nil)(c)
	}},
	{kind: api.Frame_Which_unsubscribeRequest, open: true, do: authorized(unsubscribeReq(12345), nil)},
	{kind: api.Frame_Which_createPartitionsRequest, do: authorized(createPartitionsReq("t", 1), nil),
		allow: []string{"User:CN=alice allow alter topic:t"}, deny: "User:CN=alice deny alter topic:t"},
	{kind: api.Frame_Which_replicaFetchRequest, do: authorized(replicaFetchReq("t", authzTopicID, 0, 0, 1<<20, 0), nil),
		allow: []string{"User:CN=alice allow clusteraction cluster"}, deny: "User:CN=alice deny all cluster"},
	{kind: api.Frame_Which_offsetForLeaderEpochRequest, do: authorized(offsetForLeaderEpochReq("t", authzTopicID, 0), nil),
		allow: []string{"User:CN=alice allow clusteraction cluster"}, deny: "User:* deny clusteraction cluster"},
	{kind: api.Frame_Which_initProducerIdRequest, do: authorized(initProducerIDReq, nil),
		allow: []string{"User:CN=alice allow write topic:t"}, deny: "User:CN=alice deny write topic:*"},
}

func bindingsOf(t *testing.T, lines ...string) []acl.Binding {
	t.Helper()
	var out []acl.Binding
	for _, l := range lines {
		b, err := acl.Parse(l)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// TestDataplaneAuthorization: for every data-plane request, a client
// with a valid certificate (principal User:CN=alice) is refused with
// AUTHORIZATION_FAILED without an ACL (a listing hides the resource),
// allowed with the row's ACLs, refused again when a deny ACL is added;
// another certificate (CN=bob) is not allowed by alice's ACLs, and the
// super user (CN=admin) is allowed without any.
func TestDataplaneAuthorization(t *testing.T) {
	e := startAuthzServer(t)
	setup := e.client("admin")
	setup.createTopic("t", 1)
	setup.createTopic("gone", 1)
	setup.publish("t", 0, buildBatch(t, []byte("a")))
	if authzRefused(setup.call(commitReq("g", "t"), nil)) {
		t.Fatal("the super user was refused")
	}
	rows := dataplaneAuthzRows
	covered := map[api.Frame_Which]bool{}
	for _, row := range rows {
		covered[row.kind] = true
		t.Run(row.kind.String(), func(t *testing.T) {
			e.authz.SetBindings(nil)
			a := e.client("alice")
			if row.open {
				if !row.do(a) {
					t.Fatal("refused; it needs no ACL")
				}
				return
			}
			if row.do(a) {
				t.Fatal("allowed without an ACL")
			}
			e.authz.SetBindings(bindingsOf(t, row.allow...))
			if !row.do(a) {
				t.Fatalf("refused with the ACLs %q", row.allow)
			}
			if row.do(e.client("bob")) {
				t.Fatal("CN=bob allowed by CN=alice's ACLs")
			}
			e.authz.SetBindings(bindingsOf(t, append([]string{row.deny}, row.allow...)...))
			if row.do(a) {
				t.Fatalf("allowed despite %q", row.deny)
			}
			if !row.do(e.client("admin")) {
				t.Fatal("the super user was refused")
			}
		})
	}
	for _, w := range frameRequests(t) {
		if !covered[w] {
			t.Errorf("request %v has no row in dataplaneAuthzRows", w)
		}
	}
}

// TestDataplaneFetchOffsetsFiltered: a fetchOffsets of every topic of a
// group holds only the topics the principal may describe.
func TestDataplaneFetchOffsetsFiltered(t *testing.T) {
	e := startAuthzServer(t)
	adm := e.client("admin")
	for _, name := range []string{"t", "u"} {
		adm.createTopic(name, 1)
		adm.publish(name, 0, buildBatch(t, []byte("a")))
		if authzRefused(adm.call(commitReq("g", name), nil)) {
			t.Fatal("the super user was refused")
		}
	}
	fetchAll := func(c *testClient) []string {
		r := c.call(func(f api.Frame) error {
			req, err := f.NewFetchOffsetsRequest()
			if err != nil {
				return err
			}
			return req.SetGroup("g")
		}, nil)
		expectWhich(t, r, api.Frame_Which_fetchOffsetsResponse)
		fo, _ := r.f.FetchOffsetsResponse()
		l, _ := fo.Offsets()
		var topics []string
		for i := range l.Len() {
			name, _ := l.At(i).Topic()
			topics = append(topics, name)
		}
		return topics
	}
	if got := fetchAll(adm); len(got) != 2 {
		t.Fatalf("the super user sees %v, want t and u", got)
	}
	e.authz.SetBindings(bindingsOf(t, "User:CN=alice allow describe group:g", "User:CN=alice allow read topic:t"))
	if got := fetchAll(e.client("alice")); len(got) != 1 || got[0] != "t" {
		t.Fatalf("alice sees the offsets of %v, want only t", got)
	}
}

// TestDataplaneRefusalAudited: a create or delete refused by
// authorization is audited with the certificate's principal and the
// refusal.
func TestDataplaneRefusalAudited(t *testing.T) {
	e := startAuthzServer(t)
	c := e.client("alice")
	if !authzRefused(c.call(createTopicReq("x", 1), nil)) {
		t.Fatal("alice created a topic without an ACL")
	}
	if !authzRefused(c.call(deleteTopicReq("x"), nil)) {
		t.Fatal("alice deleted a topic without an ACL")
	}
	for _, action := range []string{"action=topic.create", "action=topic.delete"} {
		lines := e.logs.lines("msg=audit", action, "resource=x", `principal="User:CN=alice"`, `result="AUTHORIZATION_FAILED: `)
		if len(lines) != 1 {
			t.Errorf("%d audit lines of a refused %s, want 1; log:\n%s", len(lines), action, e.logs)
		}
	}
}

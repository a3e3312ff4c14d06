package dataplane

import (
	"crypto/tls"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/xdg-go/scram"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/authn"
	"github.com/seedqueue/sq/internal/tlstest"
)

// userStore is an authn.Store over a map.
type userStore map[string]authn.Credential

func (s userStore) Credential(name string) (authn.Credential, bool, error) {
	c, ok := s[name]
	return c, ok, nil
}

func newAuthenticator(t testing.TB, users map[string]string) *authn.Authenticator {
	t.Helper()
	s := userStore{}
	for u, p := range users {
		c, err := authn.NewCredential(p, 0)
		if err != nil {
			t.Fatal(err)
		}
		s[u] = c
	}
	return authn.NewAuthenticator(s, nil)
}

func saslReq(mechanism string, b []byte) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewSaslAuthenticateRequest()
		if err != nil {
			return err
		}
		if err := r.SetMechanism(mechanism); err != nil {
			return err
		}
		return r.SetAuthBytes(b)
	}
}

// saslLogin runs a SCRAM-SHA-256 exchange on c and returns the error of
// the response that ended it (nil: authenticated, the server's signature
// checked).
func (c *testClient) saslLogin(user, password string) error {
	c.t.Helper()
	cl, err := scram.SHA256.NewClient(user, password, "")
	if err != nil {
		c.t.Fatal(err)
	}
	conv := cl.NewConversation()
	msg, err := conv.Step("")
	for err == nil {
		r := c.call(saslReq(authn.MechanismSCRAMSHA256, []byte(msg)), nil)
		expectWhich(c.t, r, api.Frame_Which_saslAuthenticateResponse)
		sr, _ := r.f.SaslAuthenticateResponse()
		if sr.HasError() {
			w, _ := sr.Error()
			return api.FromWire(w)
		}
		out, _ := sr.AuthBytes()
		msg, err = conv.Step(string(out))
		if sr.Complete() {
			if err == nil && !conv.Valid() {
				err = errors.New("server signature not valid")
			}
			return err
		}
	}
	return err
}

// authRow is one data-plane request for the authentication table: build
// issues it. silent marks requests answered by nothing on success.
type authRow struct {
	kind   api.Frame_Which
	build  func(api.Frame) error
	tail   []byte
	silent bool
}

// authRows returns one row per request of the data plane but the
// handshake and SaslAuthenticate. The authorization table adds its
// columns to these rows.
func authRows(t *testing.T) []authRow {
	b := buildBatch(t, []byte("v"))
	simple := func(k api.Frame_Which, set func(api.Frame) error) authRow { return authRow{kind: k, build: set} }
	return []authRow{
		simple(api.Frame_Which_metadataRequest, metadataReq("t")),
		simple(api.Frame_Which_createTopicRequest, createTopicReq("t2", 1)),
		simple(api.Frame_Which_describeTopicRequest, describeTopicReq("t")),
		simple(api.Frame_Which_listTopicsRequest, listTopicsReq),
		{kind: api.Frame_Which_publishRequest, build: publishReq("t", 0, len(b)), tail: b},
		{kind: api.Frame_Which_publishBatchesRequest, build: publishBatchesReq(api.Acks_all, batchEntry{"t", 0, b, false}), tail: b},
		simple(api.Frame_Which_fetchRequest, fetchReq("t", 0, 0, 1024, 0)),
		simple(api.Frame_Which_commitOffsetsRequest, func(f api.Frame) error {
			r, err := f.NewCommitOffsetsRequest()
			if err != nil {
				return err
			}
			return r.SetGroup("g")
		}),
		simple(api.Frame_Which_fetchOffsetsRequest, func(f api.Frame) error {
			r, err := f.NewFetchOffsetsRequest()
			if err != nil {
				return err
			}
			return r.SetGroup("g")
		}),
		simple(api.Frame_Which_deleteTopicRequest, func(f api.Frame) error {
			r, err := f.NewDeleteTopicRequest()
			if err != nil {
				return err
			}
			return r.SetName("nope")
		}),
		simple(api.Frame_Which_listOffsetsRequest, func(f api.Frame) error {
			r, err := f.NewListOffsetsRequest()
			if err != nil {
				return err
			}
			return r.SetTopic("t")
		}),
		simple(api.Frame_Which_joinGroupRequest, func(f api.Frame) error { _, err := f.NewJoinGroupRequest(); return err }),
		simple(api.Frame_Which_heartbeatRequest, func(f api.Frame) error { _, err := f.NewHeartbeatRequest(); return err }),
		simple(api.Frame_Which_leaveGroupRequest, func(f api.Frame) error { _, err := f.NewLeaveGroupRequest(); return err }),
		simple(api.Frame_Which_listGroupsRequest, func(f api.Frame) error { _, err := f.NewListGroupsRequest(); return err }),
		simple(api.Frame_Which_describeGroupRequest, func(f api.Frame) error { _, err := f.NewDescribeGroupRequest(); return err }),
		simple(api.Frame_Which_resetOffsetsRequest, func(f api.Frame) error { _, err := f.NewResetOffsetsRequest(); return err }),
		simple(api.Frame_Which_deleteGroupRequest, func(f api.Frame) error { _, err := f.NewDeleteGroupRequest(); return err }),
		{kind: api.Frame_Which_subscribeRequest, silent: true, build: func(f api.Frame) error {
			r, err := f.NewSubscribeRequest()
			if err != nil {
				return err
			}
			return r.SetTopic("t")
		}},
		{kind: api.Frame_Which_grantCreditRequest, silent: true, build: func(f api.Frame) error { _, err := f.NewGrantCreditRequest(); return err }},
		simple(api.Frame_Which_unsubscribeRequest, func(f api.Frame) error { _, err := f.NewUnsubscribeRequest(); return err }),
		simple(api.Frame_Which_createPartitionsRequest, func(f api.Frame) error {
			r, err := f.NewCreatePartitionsRequest()
			if err != nil {
				return err
			}
			return r.SetName("t")
		}),
		simple(api.Frame_Which_replicaFetchRequest, func(f api.Frame) error { _, err := f.NewReplicaFetchRequest(); return err }),
		simple(api.Frame_Which_offsetForLeaderEpochRequest, func(f api.Frame) error { _, err := f.NewOffsetForLeaderEpochRequest(); return err }),
		simple(api.Frame_Which_initProducerIdRequest, func(f api.Frame) error { _, err := f.NewInitProducerIdRequest(); return err }),
	}
}

// TestAuthRowsCoverEveryRequest keeps authRows complete: a request added
// to the schema needs its row.
func TestAuthRowsCoverEveryRequest(t *testing.T) {
	have := map[api.Frame_Which]bool{}
	for _, r := range authRows(t) {
		have[r.kind] = true
	}
	for w := api.Frame_Which(0); w < 200; w++ {
		name := w.String()
		if !strings.HasSuffix(name, "Request") || w == api.Frame_Which_handshakeRequest || w == api.Frame_Which_saslAuthenticateRequest {
			continue
		}
		if !have[w] {
			t.Errorf("no authentication row for %s", name)
		}
	}
}

// issue sends row's request then a listTopics marker and returns the
// error code of the row's answer (0: answered without an error frame, or
// not answered before the marker when silent).
func (c *testClient) issue(row authRow) api.Code {
	c.t.Helper()
	id := c.send(row.build, row.tail)
	marker := c.send(listTopicsReq, nil)
	var code api.Code
	answered, markerSeen := false, false
	for !markerSeen || (!answered && !row.silent) {
		r := c.recv()
		switch r.f.CorrelationId() {
		case marker:
			markerSeen = true
		case id:
			answered = true
			if r.f.Which() == api.Frame_Which_errorResponse {
				w, _ := r.f.ErrorResponse()
				code = api.AsError(api.FromWire(w)).Code
			}
		}
	}
	return code
}

// TestAuthRequiredEveryRequest: with AuthRequired every request of the
// data plane is refused with AUTHENTICATION_FAILED before a SCRAM
// exchange, on the same connection, and passes authentication after it
// (what it answers then, an unknown topic say, is not about who asked).
func TestAuthRequiredEveryRequest(t *testing.T) {
	b := newMemBroker()
	if _, err := b.CreateTopic("t", 1, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	h := startServer(t, b, Options{AuthRequired: true, Authenticator: newAuthenticator(t, map[string]string{"alice": "pw"})})
	anon, _ := connect(t, h.addr)
	alice, _ := connect(t, h.addr)
	if err := alice.saslLogin("alice", "pw"); err != nil {
		t.Fatalf("login: %v", err)
	}
	for _, row := range authRows(t) {
		t.Run(row.kind.String(), func(t *testing.T) {
			anon.t, alice.t = t, t
			if got := anon.issue(row); got != api.CodeAuthenticationFailed {
				t.Errorf("without credentials: code %v, want AUTHENTICATION_FAILED", got)
			}
			if got := alice.issue(row); got == api.CodeAuthenticationFailed {
				t.Errorf("authenticated: AUTHENTICATION_FAILED")
			}
		})
	}
}

// TestSASLFailures: a wrong password, an unknown user and an unknown
// mechanism fail with AUTHENTICATION_FAILED and leave the connection
// unauthenticated; a new exchange may follow, and a second one after a
// success is refused. Without AuthRequired an anonymous request passes.
func TestSASLFailures(t *testing.T) {
	a := newAuthenticator(t, map[string]string{"alice": "pw"})
	h := startServer(t, newMemBroker(), Options{AuthRequired: true, Authenticator: a})
	c, _ := connect(t, h.addr)
	for _, try := range []struct{ user, password string }{{"alice", "wrong"}, {"mallory", "pw"}} {
		if err := c.saslLogin(try.user, try.password); !errors.Is(err, api.ErrAuthenticationFailed) {
			t.Fatalf("%s/%s: %v", try.user, try.password, err)
		}
		if got := c.issue(authRow{build: listTopicsReq}); got != api.CodeAuthenticationFailed {
			t.Fatalf("after a failed exchange: %v", got)
		}
	}
	r := c.call(saslReq("PLAIN", []byte("\x00alice\x00pw")), nil)
	sr, _ := r.f.SaslAuthenticateResponse()
	if w, _ := sr.Error(); !sr.HasError() || api.AsError(api.FromWire(w)).Code != api.CodeAuthenticationFailed {
		t.Fatal("PLAIN accepted")
	}
	a.Limiter().Succeeded(c.nc.LocalAddr().String(), "alice") // no brute-force wait in this test
	if err := c.saslLogin("alice", "pw"); err != nil {
		t.Fatalf("login after failures: %v", err)
	}
	if err := c.saslLogin("alice", "pw"); !errors.Is(err, api.ErrAuthenticationFailed) {
		t.Fatalf("second exchange: %v", err)
	}
	// Optional authentication: anonymous requests pass, SASL still works.
	h2 := startServer(t, newMemBroker(), Options{Authenticator: a})
	d, _ := connect(t, h2.addr)
	if got := d.issue(authRow{build: listTopicsReq}); got != 0 {
		t.Fatalf("anonymous without AuthRequired: %v", got)
	}
	// Without a store every exchange is refused, saying why.
	h3 := startServer(t, newMemBroker(), Options{AuthRequired: true})
	e, _ := connect(t, h3.addr)
	if err := e.saslLogin("alice", "pw"); !errors.Is(err, api.ErrAuthenticationFailed) || !strings.Contains(err.Error(), "no user store") {
		t.Fatalf("without a store: %v", err)
	}
}

// TestCertAuthenticates: under mutual TLS a verified client certificate
// authenticates the connection (its subject is the principal); a SCRAM
// identity wins over it.
func TestCertAuthenticates(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	srvCert := ca.Issue(t, tlstest.Options{}).TLS(t)
	cliCert := ca.Issue(t, tlstest.Options{CommonName: "orders"}).TLS(t)
	h := startServer(t, newMemBroker(), Options{AuthRequired: true, Authenticator: newAuthenticator(t, map[string]string{"alice": "pw"})})
	// A TLS front: the server itself serves plaintext in this harness,
	// so terminate TLS here and hand the server the *tls.Conn.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{srvCert},
		ClientCAs: ca.Pool(), ClientAuth: tls.VerifyClientCertIfGiven})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- h.srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = ln.Close()
		if err := <-served; err != nil {
			t.Log(err)
		}
	})
	dialTLS := func(certs []tls.Certificate) *testClient {
		nc, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", Certificates: certs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		c := &testClient{t: t, nc: nc, fr: api.NewFrameReader(nc, 16<<20, 64<<20), next: 1}
		c.handshake(api.ProtocolVersion)
		return c
	}
	if got := dialTLS(nil).issue(authRow{build: listTopicsReq}); got != api.CodeAuthenticationFailed {
		t.Fatalf("TLS without a certificate: %v", got)
	}
	withCert := dialTLS([]tls.Certificate{cliCert})
	if got := withCert.issue(authRow{build: listTopicsReq}); got != 0 {
		t.Fatalf("with a verified certificate: %v", got)
	}
	var principals []string
	for _, c := range h.srv.snapshotConns() {
		principals = append(principals, connPrincipal(c))
	}
	if !slices.Contains(principals, "User:CN=orders") {
		t.Fatalf("principals %v", principals)
	}
	if err := withCert.saslLogin("alice", "pw"); err != nil {
		t.Fatal(err)
	}
	principals = nil
	for _, c := range h.srv.snapshotConns() {
		principals = append(principals, connPrincipal(c))
	}
	if !slices.Contains(principals, "User:alice") || slices.Contains(principals, "User:CN=orders") {
		t.Fatalf("after SCRAM: principals %v", principals)
	}
}

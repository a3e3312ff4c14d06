package control_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdg-go/scram"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/internal/authn"
)

// fakeUsers is a control.UserBackend over a map.
type fakeUsers struct {
	mu sync.Mutex
	m  map[string]authn.Credential
}

func (f *fakeUsers) Credential(name string) (authn.Credential, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.m[name]
	return c, ok, nil
}

func (f *fakeUsers) Users() map[string]authn.Credential {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.m)
}

func (f *fakeUsers) UpsertUser(_ context.Context, name string, c authn.Credential) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[name] = c
	return nil
}

func (f *fakeUsers) DeleteUser(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, name)
	return nil
}

// authNode starts a node whose users are alice/pw; mod changes its
// options first.
func authNode(t *testing.T, mod func(*control.Options)) (*node, *fakeUsers) {
	t.Helper()
	users := &fakeUsers{m: map[string]authn.Credential{}}
	c, err := authn.NewCredential("pw", 0)
	if err != nil {
		t.Fatal(err)
	}
	users.m["alice"] = c
	o := control.Options{Authenticator: authn.NewAuthenticator(users, nil)}
	if mod != nil {
		mod(&o)
	}
	n := startNode(t, o)
	n.srv.SetUsers(users)
	return n, users
}

// grpcLogin runs Users.Authenticate as user and returns the session
// token.
func grpcLogin(ctx context.Context, conn *grpc.ClientConn, user, password string) (string, error) {
	st, err := sqv1.NewUsersClient(conn).Authenticate(ctx)
	if err != nil {
		return "", err
	}
	cl, err := scram.SHA256.NewClient(user, password, "")
	if err != nil {
		return "", err
	}
	conv := cl.NewConversation()
	msg, _ := conv.Step("")
	for {
		if err := st.Send(&sqv1.AuthenticateRequest{Mechanism: authn.MechanismSCRAMSHA256, AuthBytes: []byte(msg)}); err != nil {
			return "", err
		}
		r, err := st.Recv()
		if err != nil {
			return "", err
		}
		if msg, err = conv.Step(string(r.GetAuthBytes())); err != nil {
			return "", err
		}
		if r.GetToken() != "" {
			if !conv.Valid() {
				return "", errors.New("server signature not valid")
			}
			return r.GetToken(), nil
		}
	}
}

func withToken(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

// rpcRow is one gRPC method of the authentication table: call issues it
// (an empty request by default). The authorization table adds its
// columns to these rows.
type rpcRow struct {
	method string
	call   func(ctx context.Context, conn *grpc.ClientConn) error
}

func unary(method string) rpcRow {
	return rpcRow{method, func(ctx context.Context, conn *grpc.ClientConn) error {
		return conn.Invoke(ctx, method, &emptypb.Empty{}, &emptypb.Empty{})
	}}
}

func stream(method string, clientStreams bool) rpcRow {
	return rpcRow{method, func(ctx context.Context, conn *grpc.ClientConn) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: clientStreams}, method)
		if err != nil {
			return err
		}
		if err := s.SendMsg(&emptypb.Empty{}); err != nil && !errors.Is(err, context.Canceled) {
			return s.RecvMsg(&emptypb.Empty{})
		}
		_ = s.CloseSend()
		return s.RecvMsg(&emptypb.Empty{})
	}}
}

// rpcRows lists every gRPC method but health and Users.Authenticate.
func rpcRows() []rpcRow {
	rows := []rpcRow{stream(sqv1.Messaging_PublishStream_FullMethodName, true),
		stream(sqv1.Messaging_Subscribe_FullMethodName, false),
		stream("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", true),
		stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", true)}
	for _, m := range []string{
		sqv1.Topics_CreateTopic_FullMethodName, sqv1.Topics_AlterTopicConfig_FullMethodName,
		sqv1.Topics_CreatePartitions_FullMethodName, sqv1.Topics_DeleteTopic_FullMethodName,
		sqv1.Topics_RestoreTopic_FullMethodName, sqv1.Topics_ListTopics_FullMethodName,
		sqv1.Topics_DescribeTopic_FullMethodName,
		sqv1.Groups_ListGroups_FullMethodName, sqv1.Groups_DescribeGroup_FullMethodName,
		sqv1.Groups_ResetOffsets_FullMethodName, sqv1.Groups_DeleteGroup_FullMethodName,
		sqv1.Groups_JoinGroup_FullMethodName, sqv1.Groups_Heartbeat_FullMethodName,
		sqv1.Groups_LeaveGroup_FullMethodName, sqv1.Groups_CommitGroupOffsets_FullMethodName,
		sqv1.Cluster_NodeInfo_FullMethodName, sqv1.Cluster_Members_FullMethodName,
		sqv1.Cluster_Info_FullMethodName, sqv1.Cluster_RemoveNode_FullMethodName,
		sqv1.Cluster_Join_FullMethodName, sqv1.Cluster_Propose_FullMethodName,
		sqv1.Users_CreateUser_FullMethodName, sqv1.Users_DeleteUser_FullMethodName,
		sqv1.Users_ListUsers_FullMethodName,
		sqv1.Cluster_DrainNode_FullMethodName, sqv1.Cluster_UndrainNode_FullMethodName,
		sqv1.Quotas_SetQuota_FullMethodName, sqv1.Quotas_RemoveQuota_FullMethodName,
		sqv1.Quotas_ListQuotas_FullMethodName,
		sqv1.Acls_CreateAcls_FullMethodName, sqv1.Acls_ListAcls_FullMethodName,
		sqv1.Acls_DeleteAcls_FullMethodName,
		sqv1.Messaging_Publish_FullMethodName, sqv1.Messaging_CommitOffsets_FullMethodName,
		sqv1.Messaging_FetchOffsets_FullMethodName, sqv1.Messaging_InitProducerId_FullMethodName,
	} {
		rows = append(rows, unary(m))
	}
	return rows
}

// TestAuthRequiredEveryRPC: with AuthRequired every gRPC method is
// refused without credentials (Unauthenticated, AUTHENTICATION_FAILED)
// and passes authentication with a session token; health stays
// anonymous. The rows cover every registered method.
func TestAuthRequiredEveryRPC(t *testing.T) {
	n, _ := authNode(t, func(o *control.Options) { o.AuthRequired = true })
	have := map[string]bool{"/sq.v1.Users/Authenticate": true}
	for _, r := range rpcRows() {
		have[r.method] = true
	}
	for svc, info := range n.srv.GRPCServer().GetServiceInfo() {
		if svc == "grpc.health.v1.Health" {
			continue
		}
		for _, m := range info.Methods {
			if full := "/" + svc + "/" + m.Name; !have[full] {
				t.Errorf("no authentication row for %s", full)
			}
		}
	}
	ctx := context.Background()
	tok, err := grpcLogin(ctx, n.conn, "alice", "pw")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rpcRows() {
		t.Run(r.method, func(t *testing.T) {
			err := r.call(ctx, n.conn)
			if st := status.Convert(err); st.Code() != codes.Unauthenticated || errorReason(st) != "AUTHENTICATION_FAILED" {
				t.Errorf("without credentials: %v", err)
			}
			err = r.call(withToken(ctx, tok), n.conn)
			if st := status.Convert(err); st.Code() == codes.Unauthenticated {
				t.Errorf("with a token: %v", err)
			}
		})
	}
	if err := n.conn.Invoke(ctx, "/grpc.health.v1.Health/Check", &emptypb.Empty{}, &emptypb.Empty{}); err != nil {
		t.Errorf("health without credentials: %v", err)
	}
}

// TestAuthenticateRPC: wrong passwords and unknown users get no token;
// a forged token is refused even without AuthRequired; a token dies with
// its user's credential.
func TestAuthenticateRPC(t *testing.T) {
	n, users := authNode(t, nil)
	ctx := context.Background()
	for _, c := range []struct{ user, password string }{{"alice", "nope"}, {"bob", "pw"}} {
		_, err := grpcLogin(ctx, n.conn, c.user, c.password)
		if st := status.Convert(err); st.Code() != codes.Unauthenticated || errorReason(st) != "AUTHENTICATION_FAILED" {
			t.Errorf("%s/%s: %v", c.user, c.password, err)
		}
	}
	pw2, _ := authn.NewCredential("pw2", 0)
	if err := users.UpsertUser(ctx, "bob", pw2); err != nil {
		t.Fatal(err)
	}
	list := sqv1.NewTopicsClient(n.conn)
	if _, err := list.ListTopics(ctx, &sqv1.ListTopicsRequest{}); err != nil {
		t.Fatalf("anonymous without AuthRequired: %v", err)
	}
	if _, err := list.ListTopics(withToken(ctx, "forged"), &sqv1.ListTopicsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("forged token: %v", err)
	}
	tok, err := grpcLogin(ctx, n.conn, "bob", "pw2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := list.ListTopics(withToken(ctx, tok), &sqv1.ListTopicsRequest{}); err != nil {
		t.Fatalf("with a token: %v", err)
	}
	changed, _ := authn.NewCredential("changed", 0)
	if err := users.UpsertUser(ctx, "bob", changed); err != nil {
		t.Fatal(err)
	}
	if _, err := list.ListTopics(withToken(ctx, tok), &sqv1.ListTopicsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("token after a password change: %v", err)
	}
}

// TestUsersRPC: create from a password and from a client-salted
// credential, list, delete, refusals; each change audited with the
// principal.
func TestUsersRPC(t *testing.T) {
	var logs syncBuf
	n, users := authNode(t, func(o *control.Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	ctx := context.Background()
	uc := sqv1.NewUsersClient(n.conn)
	if _, err := uc.CreateUser(ctx, &sqv1.CreateUserRequest{Name: "bob", Secret: &sqv1.CreateUserRequest_Password{Password: "pw"}, Iterations: 8192}); err != nil {
		t.Fatal(err)
	}
	c, _ := authn.NewCredential("x", 0)
	pre := &sqv1.ScramCredential{Mechanism: c.Mechanism, Iterations: int32(c.Iterations), Salt: c.Salt, StoredKey: c.StoredKey, ServerKey: c.ServerKey}
	if _, err := uc.CreateUser(ctx, &sqv1.CreateUserRequest{Name: "carol", Secret: &sqv1.CreateUserRequest_Credential{Credential: pre}}); err != nil {
		t.Fatal(err)
	}
	if cr, _, _ := users.Credential("carol"); !bytes.Equal(cr.StoredKey, c.StoredKey) {
		t.Fatal("pre-salted credential not stored as given")
	}
	bad := []struct {
		req  *sqv1.CreateUserRequest
		want string // said once, without authn's "authn: invalid" prefix
	}{
		{&sqv1.CreateUserRequest{Name: "dave"}, "a password or a credential is required"},
		{&sqv1.CreateUserRequest{Name: "", Secret: &sqv1.CreateUserRequest_Password{Password: "pw"}}, "empty user name"},
		{&sqv1.CreateUserRequest{Name: " x", Secret: &sqv1.CreateUserRequest_Password{Password: "pw"}}, "begins or ends with a space"},
		{&sqv1.CreateUserRequest{Name: "dave", Secret: &sqv1.CreateUserRequest_Password{Password: "pw"}, Iterations: 10}, "iterations must be"},
		{&sqv1.CreateUserRequest{Name: "dave", Secret: &sqv1.CreateUserRequest_Credential{Credential: &sqv1.ScramCredential{Mechanism: "SCRAM-SHA-256", Iterations: 4096}}}, `user "dave": `},
	}
	for i, r := range bad {
		_, err := uc.CreateUser(ctx, r.req)
		msg := status.Convert(err).Message()
		if status.Code(err) != codes.InvalidArgument || strings.Count(msg, r.want) != 1 || strings.Contains(msg, "authn:") {
			t.Errorf("bad request %d: %v, want InvalidArgument saying %q once", i, err, r.want)
		}
	}
	l, err := uc.ListUsers(ctx, &sqv1.ListUsersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range l.GetUsers() {
		names = append(names, u.GetName())
		if u.GetName() == "bob" && (u.GetIterations() != 8192 || u.GetMechanism() != "SCRAM-SHA-256") {
			t.Errorf("bob listed as %v", u)
		}
	}
	if !slices.Equal(names, []string{"alice", "bob", "carol"}) {
		t.Fatalf("users %v", names)
	}
	tok, err := grpcLogin(ctx, n.conn, "bob", "pw")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := uc.DeleteUser(withToken(ctx, tok), &sqv1.DeleteUserRequest{Name: "carol"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "audit lines", func() bool {
		s := logs.String()
		return strings.Contains(s, "action=user.create resource=bob principal=User:ANONYMOUS") &&
			strings.Contains(s, "action=user.delete resource=carol principal=User:bob") &&
			strings.Contains(s, "action=user.create resource=dave") && strings.Contains(s, "INVALID_REQUEST")
	})
	// A node without the metadata log says so.
	m := startNode(t, control.Options{})
	if _, err := sqv1.NewUsersClient(m.conn).ListUsers(ctx, &sqv1.ListUsersRequest{}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "metadata log") {
		t.Fatalf("without a user store: %v", err)
	}
}

// TestMetricsAuth: with MetricsAuth /metrics needs a user's credentials,
// /healthz and /readyz do not.
func TestMetricsAuth(t *testing.T) {
	n, _ := authNode(t, func(o *control.Options) { o.MetricsAuth = true })
	get := func(path, user, password string) int {
		req, _ := http.NewRequest("GET", "http://"+n.httpAddr+path, nil)
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, user, password string
		want                 int
	}{
		{"/metrics", "", "", 401},
		{"/metrics", "alice", "wrong", 401},
		{"/metrics", "alice", "pw", 200},
		{"/healthz", "", "", 200},
		{"/readyz", "", "", 200},
	} {
		if got := get(c.path, c.user, c.password); got != c.want {
			t.Errorf("%s as %q/%q: %d, want %d", c.path, c.user, c.password, got, c.want)
		}
	}
}

// syncBuf is a concurrency-safe log sink.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

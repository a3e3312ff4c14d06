package control_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/internal/acl"
	"github.com/seedqueue/sq/internal/tlstest"
)

// memACLs is an in-memory control.ACLStore that also feeds an
// Authorizer, as the metadata log does in a server.
type memACLs struct {
	mu    sync.Mutex
	bs    []acl.Binding
	authz *acl.Authorizer
}

func (m *memACLs) CreateACLs(_ context.Context, bs []acl.Binding) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bs = acl.Sorted(append(slices.Clone(m.bs), bs...))
	m.authz.SetBindings(m.bs)
	return nil
}

func (m *memACLs) DeleteACLs(_ context.Context, fs []acl.Filter) ([]acl.Binding, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	gone := acl.Select(m.bs, fs)
	m.bs = slices.DeleteFunc(slices.Clone(m.bs), func(b acl.Binding) bool { return slices.Contains(gone, b) })
	m.authz.SetBindings(m.bs)
	return gone, nil
}

func (m *memACLs) ACLs() []acl.Binding {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bs
}

func (m *memACLs) set(t *testing.T, lines ...string) {
	t.Helper()
	var bs []acl.Binding
	for _, l := range lines {
		b, err := acl.Parse(l)
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bs = acl.Sorted(bs)
	m.authz.SetBindings(m.bs)
}

// authzNode is a control plane under mutual TLS with authorization on;
// User:CN=admin is a super user.
type authzNode struct {
	acls *memACLs
	ca   *tlstest.CA
	addr string
}

func startAuthzNode(t *testing.T) *authzNode {
	t.Helper()
	return startAuthzNodeLog(t, quietLogger())
}

func startAuthzNodeLog(t *testing.T, log *slog.Logger) *authzNode {
	t.Helper()
	ca := tlstest.NewCA(t, "sq-test-ca")
	server := ca.Issue(t, tlstest.Options{CommonName: "localhost"})
	a, err := acl.New(acl.Options{Enabled: true, SuperUsers: []string{"User:CN=admin"}})
	if err != nil {
		t.Fatal(err)
	}
	store := &memACLs{authz: a}
	srv, err := control.New(control.Options{NodeID: "n1", Logger: log, Authorizer: a, SubscribeMaxWait: 50 * time.Millisecond,
		TLS: &tls.Config{Certificates: []tls.Certificate{server.TLS(t)}, ClientCAs: ca.Pool(),
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetCluster(&fakeBackend{})
	srv.SetACLStore(store)
	srv.SetEngine(openEngine(t))
	srv.SetReady(true)
	gl := listen(t)
	done := make(chan struct{})
	go func() { _ = srv.ServeGRPC(gl); close(done) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	return &authzNode{acls: store, ca: ca, addr: gl.Addr().String()}
}

// conn returns a gRPC connection with a certificate of common name cn.
func (n *authzNode) conn(t *testing.T, cn string) *grpc.ClientConn {
	t.Helper()
	leaf := n.ca.Issue(t, tlstest.Options{CommonName: cn})
	cc, err := grpc.NewClient(n.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: n.ca.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{leaf.TLS(t)}})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// passed reports whether err is not an authorization refusal, and fails
// the test when a refusal is not PermissionDenied with
// AUTHORIZATION_FAILED.
func passed(t *testing.T, err error) bool {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != codes.PermissionDenied {
		return true
	}
	if r := errorReason(st); r != "AUTHORIZATION_FAILED" {
		t.Fatalf("PermissionDenied with reason %q: %v", r, err)
	}
	return false
}

// grpcAuthzRow is one sq.v1 method: do calls it and reports whether it
// was authorized (for a listing: whether it shows topic t or group g).
// allow are ACLs that let CN=alice through; deny one that beats them.
type grpcAuthzRow struct {
	method string
	do     func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool
	allow  []string
	deny   string
	// open rows need no ACL (Users.Authenticate).
	open bool
}

const (
	readT  = "User:CN=alice allow read topic:t"
	readG  = "User:CN=alice allow read group:g"
	descCl = "User:CN=alice allow describe cluster"
	alterC = "User:CN=alice allow alter cluster"
)

func topicsOf(cc *grpc.ClientConn) sqv1.TopicsClient   { return sqv1.NewTopicsClient(cc) }
func groupsOf(cc *grpc.ClientConn) sqv1.GroupsClient   { return sqv1.NewGroupsClient(cc) }
func clusterOf(cc *grpc.ClientConn) sqv1.ClusterClient { return sqv1.NewClusterClient(cc) }
func msgOf(cc *grpc.ClientConn) sqv1.MessagingClient   { return sqv1.NewMessagingClient(cc) }
func aclsOf(cc *grpc.ClientConn) sqv1.AclsClient       { return sqv1.NewAclsClient(cc) }

var authzOffsets = []*sqv1.OffsetEntry{{Topic: "t", Partition: 0, Offset: 0}}

// grpcAuthzRows covers every sq.v1 method (checked by the test).
var grpcAuthzRows = []grpcAuthzRow{
	{sqv1.Topics_CreateTopic_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := topicsOf(cc).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "new", Partitions: 1})
		return passed(t, err)
	}, []string{"User:CN=alice allow create topic:ne*"}, "User:CN=alice deny create topic:new", false},
	{sqv1.Topics_AlterTopicConfig_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := topicsOf(cc).AlterTopicConfig(ctx, &sqv1.AlterTopicConfigRequest{Name: "t"})
		return passed(t, err)
	}, []string{"User:CN=alice allow alter topic:t"}, "User:CN=alice deny alter topic:t", false},
	{sqv1.Topics_CreatePartitions_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := topicsOf(cc).CreatePartitions(ctx, &sqv1.CreatePartitionsRequest{Name: "t", TotalCount: 1})
		return passed(t, err)
	}, []string{"User:CN=alice allow alter topic:t"}, "User:CN=alice deny all topic:t", false},
	{sqv1.Topics_DeleteTopic_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := topicsOf(cc).DeleteTopic(ctx, &sqv1.DeleteTopicRequest{Name: "gone"})
		return passed(t, err)
	}, []string{"User:CN=alice allow delete topic:gone"}, "User:CN=alice deny delete topic:gone", false},
	{sqv1.Topics_RestoreTopic_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := topicsOf(cc).RestoreTopic(ctx, &sqv1.RestoreTopicRequest{Name: "old"})
		return passed(t, err)
	}, []string{"User:CN=alice allow create topic:old"}, "User:CN=alice deny create topic:old", false},
	{sqv1.Topics_ListTopics_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		r, err := topicsOf(cc).ListTopics(ctx, &sqv1.ListTopicsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(r.GetTopics(), func(x *sqv1.TopicInfo) bool { return x.GetName() == "t" })
	}, []string{readT}, "User:CN=alice deny describe topic:t", false},
	{sqv1.Topics_DescribeTopic_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := topicsOf(cc).DescribeTopic(ctx, &sqv1.DescribeTopicRequest{Name: "t"})
		return passed(t, err)
	}, []string{"User:CN=alice allow describe topic:t"}, "User:* deny describe topic:*", false},
	{sqv1.Groups_ListGroups_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		r, err := groupsOf(cc).ListGroups(ctx, &sqv1.ListGroupsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(r.GetGroups(), func(x *sqv1.GroupSummary) bool { return x.GetGroup() == "g" })
	}, []string{"User:CN=alice allow describe group:g"}, "User:CN=alice deny describe group:g", false},
	{sqv1.Groups_DescribeGroup_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := groupsOf(cc).DescribeGroup(ctx, &sqv1.DescribeGroupRequest{Group: "g"})
		return passed(t, err)
	}, []string{readG}, "User:CN=alice deny describe group:g", false},
	{sqv1.Groups_ResetOffsets_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := groupsOf(cc).ResetOffsets(ctx, &sqv1.ResetOffsetsRequest{Group: "g", Topic: "t", To: "earliest"})
		return passed(t, err)
	}, []string{readG, readT}, "User:CN=alice deny read topic:t", false},
	{sqv1.Groups_DeleteGroup_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := groupsOf(cc).DeleteGroup(ctx, &sqv1.DeleteGroupRequest{Group: "nogroup"})
		return passed(t, err)
	}, []string{"User:CN=alice allow delete group:no*"}, "User:CN=alice deny delete group:nogroup", false},
	{sqv1.Groups_JoinGroup_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := groupsOf(cc).JoinGroup(ctx, &sqv1.JoinGroupRequest{Group: "j", Topics: []string{"t"}})
		return passed(t, err)
	}, []string{"User:CN=alice allow read group:j", readT}, "User:CN=alice deny describe topic:t", false},
	{sqv1.Groups_Heartbeat_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := groupsOf(cc).Heartbeat(ctx, &sqv1.HeartbeatRequest{Group: "g", MemberId: "m"})
		return passed(t, err)
	}, []string{readG}, "User:CN=alice deny read group:g", false},
	{sqv1.Groups_LeaveGroup_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := groupsOf(cc).LeaveGroup(ctx, &sqv1.LeaveGroupRequest{Group: "g", MemberId: "m"})
		return passed(t, err)
	}, []string{readG}, "User:CN=alice deny all group:g", false},
	{sqv1.Groups_CommitGroupOffsets_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := groupsOf(cc).CommitGroupOffsets(ctx, &sqv1.CommitGroupOffsetsRequest{Group: "g", MemberId: "m", Offsets: authzOffsets})
		return passed(t, err)
	}, []string{readG, readT}, "User:CN=alice deny read group:g", false},
	{sqv1.Cluster_NodeInfo_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := clusterOf(cc).NodeInfo(ctx, &sqv1.NodeInfoRequest{})
		return passed(t, err)
	}, []string{descCl}, "User:CN=alice deny describe cluster", false},
	{sqv1.Cluster_Members_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := clusterOf(cc).Members(ctx, &sqv1.MembersRequest{})
		return passed(t, err)
	}, []string{alterC}, "User:CN=alice deny describe cluster", false},
	{sqv1.Cluster_Info_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := clusterOf(cc).Info(ctx, &sqv1.ClusterInfoRequest{})
		return passed(t, err)
	}, []string{descCl}, "User:* deny all cluster", false},
	{sqv1.Cluster_RemoveNode_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := clusterOf(cc).RemoveNode(ctx, &sqv1.RemoveNodeRequest{NodeId: "x"})
		return passed(t, err)
	}, []string{alterC}, "User:CN=alice deny alter cluster", false},
	{sqv1.Cluster_Join_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := clusterOf(cc).Join(ctx, &sqv1.JoinRequest{ClusterId: "cx", NodeId: "d"})
		return passed(t, err)
	}, []string{"User:CN=alice allow clusteraction cluster"}, "User:CN=alice deny clusteraction cluster", false},
	{sqv1.Cluster_Propose_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := clusterOf(cc).Propose(ctx, &sqv1.ProposeRequest{Command: []byte("c")})
		return passed(t, err)
	}, []string{"User:CN=alice allow all cluster"}, "User:CN=alice deny clusteraction cluster", false},
	{sqv1.Messaging_Publish_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := msgOf(cc).Publish(ctx, &sqv1.PublishRequest{Topic: "t", Records: []*sqv1.Record{{Value: []byte("v")}}})
		return passed(t, err)
	}, []string{"User:CN=alice allow write topic:t"}, "User:CN=alice deny write topic:t", false},
	{sqv1.Messaging_PublishStream_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		s, err := msgOf(cc).PublishStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&sqv1.PublishRequest{Topic: "t", Records: []*sqv1.Record{{Value: []byte("v")}}}); err != nil {
			t.Fatal(err)
		}
		_, err = s.CloseAndRecv()
		return passed(t, err)
	}, []string{"User:CN=alice allow write topic:t*"}, "User:CN=alice deny write topic:t", false},
	{sqv1.Messaging_Subscribe_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		s, err := msgOf(cc).Subscribe(ctx, &sqv1.SubscribeRequest{Topic: "t"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Recv()
		return passed(t, err)
	}, []string{readT}, "User:CN=alice deny read topic:t", false},
	{sqv1.Messaging_CommitOffsets_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := msgOf(cc).CommitOffsets(ctx, &sqv1.CommitOffsetsRequest{Group: "g", Offsets: authzOffsets})
		return passed(t, err)
	}, []string{readG, readT}, "User:CN=alice deny read topic:t", false},
	{sqv1.Messaging_FetchOffsets_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := msgOf(cc).FetchOffsets(ctx, &sqv1.FetchOffsetsRequest{Group: "g", Topic: "t"})
		return passed(t, err)
	}, []string{readG, readT}, "User:CN=alice deny describe group:g", false},
	{sqv1.Messaging_InitProducerId_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := msgOf(cc).InitProducerId(ctx, &sqv1.InitProducerIdRequest{})
		return passed(t, err)
	}, []string{"User:CN=alice allow write topic:x-*"}, "User:CN=alice deny write topic:*", false},
	{sqv1.Cluster_DrainNode_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := clusterOf(cc).DrainNode(ctx, &sqv1.DrainNodeRequest{NodeId: "x"})
		return passed(t, err)
	}, []string{alterC}, "User:CN=alice deny alter cluster", false},
	{sqv1.Cluster_UndrainNode_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := clusterOf(cc).UndrainNode(ctx, &sqv1.UndrainNodeRequest{NodeId: "x"})
		return passed(t, err)
	}, []string{alterC}, "User:CN=alice deny alter cluster", false},
	{sqv1.Quotas_SetQuota_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := sqv1.NewQuotasClient(cc).SetQuota(ctx, &sqv1.SetQuotaRequest{Principal: "bob", ProduceBytesPerSec: 1 << 20})
		return passed(t, err)
	}, []string{alterC}, "User:CN=alice deny alter cluster", false},
	{sqv1.Quotas_RemoveQuota_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := sqv1.NewQuotasClient(cc).RemoveQuota(ctx, &sqv1.RemoveQuotaRequest{Principal: "bob"})
		return passed(t, err)
	}, []string{alterC}, "User:CN=alice deny alter cluster", false},
	{sqv1.Quotas_ListQuotas_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := sqv1.NewQuotasClient(cc).ListQuotas(ctx, &sqv1.ListQuotasRequest{})
		return passed(t, err)
	}, []string{descCl}, "User:CN=alice deny describe cluster", false},
	{method: sqv1.Users_CreateUser_FullMethodName, do: func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := sqv1.NewUsersClient(cc).CreateUser(ctx, &sqv1.CreateUserRequest{Name: "u", Secret: &sqv1.CreateUserRequest_Password{Password: "p"}})
		return passed(t, err)
	}, allow: []string{alterC}, deny: "User:CN=alice deny alter cluster"},
	{method: sqv1.Users_DeleteUser_FullMethodName, do: func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := sqv1.NewUsersClient(cc).DeleteUser(ctx, &sqv1.DeleteUserRequest{Name: "u"})
		return passed(t, err)
	}, allow: []string{alterC}, deny: "User:CN=alice deny alter cluster"},
	{method: sqv1.Users_ListUsers_FullMethodName, do: func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := sqv1.NewUsersClient(cc).ListUsers(ctx, &sqv1.ListUsersRequest{})
		return passed(t, err)
	}, allow: []string{descCl}, deny: "User:CN=alice deny describe cluster"},
	{method: sqv1.Users_Authenticate_FullMethodName, open: true, do: func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		st, err := sqv1.NewUsersClient(cc).Authenticate(ctx)
		if err == nil {
			err = st.Send(&sqv1.AuthenticateRequest{Mechanism: "SCRAM-SHA-256", AuthBytes: []byte("n,,n=u,r=x")})
		}
		if err == nil {
			_, err = st.Recv()
		}
		return passed(t, err)
	}},
	{sqv1.Acls_CreateAcls_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := aclsOf(cc).CreateAcls(ctx, &sqv1.CreateAclsRequest{})
		return passed(t, err)
	}, []string{alterC}, "User:CN=alice deny alter cluster", false},
	{sqv1.Acls_ListAcls_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := aclsOf(cc).ListAcls(ctx, &sqv1.ListAclsRequest{})
		return passed(t, err)
	}, []string{descCl}, "User:CN=alice deny describe cluster", false},
	{sqv1.Acls_DeleteAcls_FullMethodName, func(t *testing.T, ctx context.Context, cc *grpc.ClientConn) bool {
		_, err := aclsOf(cc).DeleteAcls(ctx, &sqv1.DeleteAclsRequest{})
		return passed(t, err)
	}, []string{alterC}, "User:CN=alice deny alter cluster", false},
}

// TestGRPCAuthorization: for every sq.v1 method, a client with a valid
// certificate (User:CN=alice) is refused with PermissionDenied /
// AUTHORIZATION_FAILED without an ACL (a listing hides the resource),
// allowed with the row's ACLs, refused again when a deny ACL is added;
// CN=bob is not allowed by alice's ACLs, and the super user CN=admin is
// allowed without any.
func TestGRPCAuthorization(t *testing.T) {
	n := startAuthzNode(t)
	ctx := context.Background()
	adm := n.conn(t, "admin")
	for _, name := range []string{"t", "gone"} {
		if _, err := sqv1.NewTopicsClient(adm).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: name, Partitions: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sqv1.NewMessagingClient(adm).Publish(ctx, &sqv1.PublishRequest{Topic: "t", Records: []*sqv1.Record{{Value: []byte("a")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sqv1.NewMessagingClient(adm).CommitOffsets(ctx, &sqv1.CommitOffsetsRequest{Group: "g", Offsets: []*sqv1.OffsetEntry{{Topic: "t", Offset: 1}}}); err != nil {
		t.Fatal(err)
	}
	alice, bob := n.conn(t, "alice"), n.conn(t, "bob")
	covered := map[string]bool{}
	for _, row := range grpcAuthzRows {
		covered[row.method] = true
		t.Run(row.method, func(t *testing.T) {
			n.acls.set(t)
			if row.open {
				if !row.do(t, ctx, alice) || !row.do(t, ctx, bob) {
					t.Fatal("an open method was refused")
				}
				return
			}
			if row.do(t, ctx, alice) {
				t.Fatal("allowed without an ACL")
			}
			n.acls.set(t, row.allow...)
			if !row.do(t, ctx, alice) {
				t.Fatalf("refused with the ACLs %q", row.allow)
			}
			if row.do(t, ctx, bob) {
				t.Fatal("CN=bob allowed by CN=alice's ACLs")
			}
			n.acls.set(t, append([]string{row.deny}, row.allow...)...)
			if row.do(t, ctx, alice) {
				t.Fatalf("allowed despite %q", row.deny)
			}
			if !row.do(t, ctx, adm) {
				t.Fatal("the super user was refused")
			}
		})
	}
	svcs := sqv1.File_sq_proto.Services()
	for i := range svcs.Len() {
		ms := svcs.Get(i).Methods()
		for j := range ms.Len() {
			m := "/" + string(svcs.Get(i).FullName()) + "/" + string(ms.Get(j).Name())
			if !covered[m] {
				t.Errorf("%s has no row in grpcAuthzRows", m)
			}
		}
	}
}

// TestACLService: ACLs created, listed with a filter and deleted by
// filter through the Acls service (as the super user), and an invalid
// binding refused with InvalidArgument naming it.
func TestACLService(t *testing.T) {
	n := startAuthzNode(t)
	ctx := context.Background()
	cl := sqv1.NewAclsClient(n.conn(t, "admin"))
	var bs []*sqv1.AclBinding
	for _, l := range []string{"User:CN=alice allow read topic:t", "User:CN=alice allow write topic:p-*", "User:CN=bob deny all group:*"} {
		b, err := acl.Parse(l)
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, acl.ToProto(b))
	}
	if _, err := cl.CreateAcls(ctx, &sqv1.CreateAclsRequest{Acls: bs}); err != nil {
		t.Fatal(err)
	}
	_, err := cl.CreateAcls(ctx, &sqv1.CreateAclsRequest{Acls: []*sqv1.AclBinding{{Principal: "alice", Permission: "allow", Operation: "read", ResourceType: "topic", ResourceName: "t"}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("invalid binding: %v", err)
	}
	l, err := cl.ListAcls(ctx, &sqv1.ListAclsRequest{Filter: &sqv1.AclFilter{Principal: "User:CN=alice"}})
	if err != nil || len(l.GetAcls()) != 2 {
		t.Fatalf("list alice's: %v, %v", l.GetAcls(), err)
	}
	d, err := cl.DeleteAcls(ctx, &sqv1.DeleteAclsRequest{Filters: []*sqv1.AclFilter{{ResourceType: "topic", ResourceName: "p-x", PatternType: "match"}}})
	if err != nil || len(d.GetDeleted()) != 1 || d.GetDeleted()[0].GetResourceName() != "p-" {
		t.Fatalf("delete: %v, %v", d.GetDeleted(), err)
	}
	if got := len(n.acls.ACLs()); got != 2 {
		t.Fatalf("%d ACLs left, want 2", got)
	}
	if _, err := cl.DeleteAcls(ctx, &sqv1.DeleteAclsRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("delete without a filter: %v", err)
	}
}

// TestACLChangesAreAudited: every ACL change is audited with its
// principal (the client certificate's), address and result, a refused
// one included.
func TestACLChangesAreAudited(t *testing.T) {
	var logs lockedBuffer
	n := startAuthzNodeLog(t, slog.New(slog.NewJSONHandler(&logs, nil)))
	ctx := context.Background()
	b, err := acl.Parse("User:CN=alice allow read topic:t")
	if err != nil {
		t.Fatal(err)
	}
	req := &sqv1.CreateAclsRequest{Acls: []*sqv1.AclBinding{acl.ToProto(b)}}
	if _, err := sqv1.NewAclsClient(n.conn(t, "admin")).CreateAcls(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := sqv1.NewAclsClient(n.conn(t, "alice")).CreateAcls(ctx, req); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("alice creating an ACL: %v", err)
	}
	if _, err := sqv1.NewAclsClient(n.conn(t, "admin")).DeleteAcls(ctx, &sqv1.DeleteAclsRequest{Filters: []*sqv1.AclFilter{{Principal: "User:CN=alice"}}}); err != nil {
		t.Fatal(err)
	}
	want := []struct{ action, principal, resource, result string }{
		{"acl.create", "User:CN=admin", "User:CN=alice allow read topic:t", "ok"},
		{"acl.create", "User:CN=alice", "User:CN=alice allow read topic:t", "AUTHORIZATION_FAILED: "},
		{"acl.delete", "User:CN=admin", "User:CN=alice", "ok"},
	}
	got := logs.auditLines(t)
	if len(got) != len(want) {
		t.Fatalf("%d audit lines, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		result, _ := g["result"].(string)
		resource, _ := g["resource"].(string)
		if g["action"] != w.action || g["principal"] != w.principal || !strings.Contains(resource, w.resource) ||
			!strings.HasPrefix(result, w.result) || !strings.HasPrefix(g["remote"].(string), "127.0.0.1:") {
			t.Errorf("audit line %d: %v, want %s of %s by %s: %s…", i, g, w.action, w.resource, w.principal, w.result)
		}
	}
}

// TestGRPCFetchOffsetsFiltered: FetchOffsets of every topic of a group
// holds only the topics the principal may describe.
func TestGRPCFetchOffsetsFiltered(t *testing.T) {
	n := startAuthzNode(t)
	ctx := context.Background()
	adm := n.conn(t, "admin")
	for _, name := range []string{"t", "u"} {
		if _, err := sqv1.NewTopicsClient(adm).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: name, Partitions: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := sqv1.NewMessagingClient(adm).Publish(ctx, &sqv1.PublishRequest{Topic: name, Records: []*sqv1.Record{{Value: []byte("a")}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := sqv1.NewMessagingClient(adm).CommitOffsets(ctx, &sqv1.CommitOffsetsRequest{Group: "g", Offsets: []*sqv1.OffsetEntry{{Topic: name, Offset: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	n.acls.set(t, "User:CN=alice allow describe group:g", "User:CN=alice allow read topic:t")
	r, err := sqv1.NewMessagingClient(n.conn(t, "alice")).FetchOffsets(ctx, &sqv1.FetchOffsetsRequest{Group: "g"})
	if err != nil || len(r.GetOffsets()) != 1 || r.GetOffsets()[0].GetTopic() != "t" {
		t.Fatalf("alice's FetchOffsets of every topic: %v, %v; want only t", r.GetOffsets(), err)
	}
	r, err = sqv1.NewMessagingClient(adm).FetchOffsets(ctx, &sqv1.FetchOffsetsRequest{Group: "g"})
	if err != nil || len(r.GetOffsets()) != 2 {
		t.Fatalf("the super user's FetchOffsets: %v, %v", r.GetOffsets(), err)
	}
}

package sdk

import (
	"bufio"

	"errors"
	"fmt"
	"net"
	"time"

	"github.com/xdg-go/scram"

	"github.com/seedqueue/sq/api"
)

// SASLMechanism is how a client authenticates to the server: SCRAM is the
// one implementation. Set it as the SASL field of a client's config.
type SASLMechanism interface {
	// conversation starts a client conversation and names its mechanism.
	conversation() (*scram.ClientConversation, string, error)
}

// SCRAM authenticates as User with Password using SCRAM-SHA-256 (RFC 5802,
// RFC 7677): the password never travels, the client proves it knows it
// and checks that the server holds the user's credential. On the data
// plane the exchange runs on every new connection after the handshake
// (SaslAuthenticate); on gRPC it runs once per node through
// Users.Authenticate, whose session token then goes with every call and
// is renewed before it expires. A refusal is an error matching
// api.ErrAuthenticationFailed, never retried.
type SCRAM struct {
	User     string
	Password string
}

// scramMechanism is the SASL name of SCRAM-SHA-256.
const scramMechanism = "SCRAM-SHA-256"

func (s SCRAM) conversation() (*scram.ClientConversation, string, error) {
	if s.User == "" {
		return nil, "", api.NewError(api.CodeAuthenticationFailed, "SCRAM: empty user name")
	}
	c, err := scram.SHA256.NewClient(s.User, s.Password, "")
	if err != nil {
		return nil, "", api.WrapError(api.CodeAuthenticationFailed, err, "SCRAM: %v", err)
	}
	return c.NewConversation(), scramMechanism, nil
}

// errServerSignature is the failure of a server that does not prove it
// holds the user's credential.
var errServerSignature = errors.New("the server's SCRAM signature is not valid: it does not hold this user's credential")

// runSASL runs m's exchange with step, which sends one client message
// (with the mechanism on the first) and returns the server's answer and
// whether it was the last. Errors match api.ErrAuthenticationFailed.
func runSASL(m SASLMechanism, step func(mechanism string, msg []byte) (resp []byte, done bool, err error)) error {
	conv, mech, err := m.conversation()
	if err != nil {
		return err
	}
	msg, err := conv.Step("")
	if err != nil {
		return api.WrapError(api.CodeAuthenticationFailed, err, "SCRAM: %v", err)
	}
	for {
		resp, done, err := step(mech, []byte(msg))
		if err != nil {
			return err
		}
		msg, err = conv.Step(string(resp))
		if err != nil {
			return api.WrapError(api.CodeAuthenticationFailed, err, "SCRAM: %v", err)
		}
		if done {
			if !conv.Valid() {
				return api.WrapError(api.CodeAuthenticationFailed, errServerSignature, "SCRAM: %v", errServerSignature)
			}
			return nil
		}
	}
}

// saslDataPlane authenticates a handshaken data-plane connection nc with
// m before any other request, bounded by deadline; br is the connection's
// buffered reader and maxFrame the server's frame limit.
func saslDataPlane(nc net.Conn, br *bufio.Reader, maxFrame uint32, m SASLMechanism, deadline time.Time) error {
	_ = nc.SetDeadline(deadline)
	defer func() { _ = nc.SetDeadline(time.Time{}) }()
	fr := api.NewFrameReader(br, maxFrame, 0)
	var id uint64
	return runSASL(m, func(mech string, msg []byte) ([]byte, bool, error) {
		id++
		out, f, err := api.NewFrameMessage(id)
		if err != nil {
			return nil, false, err
		}
		r, err := f.NewSaslAuthenticateRequest()
		if err == nil {
			if err = r.SetMechanism(mech); err == nil {
				err = r.SetAuthBytes(msg)
			}
		}
		if err != nil {
			return nil, false, err
		}
		if err := api.WriteFrame(nc, out); err != nil {
			return nil, false, fmt.Errorf("SASL: %w", err)
		}
		_, rf, err := fr.ReadFrame()
		if err != nil {
			return nil, false, fmt.Errorf("SASL: %w", err)
		}
		switch rf.Which() {
		case api.Frame_Which_saslAuthenticateResponse:
		case api.Frame_Which_errorResponse:
			we, _ := rf.ErrorResponse()
			return nil, false, wireErr(we)
		default:
			return nil, false, fmt.Errorf("SASL: %w: %v", ErrUnexpectedResponse, rf.Which())
		}
		sr, err := rf.SaslAuthenticateResponse()
		if err != nil {
			return nil, false, err
		}
		if sr.HasError() {
			we, _ := sr.Error()
			if err := api.FromWire(we); err != nil {
				return nil, false, err
			}
		}
		b, err := sr.AuthBytes()
		return append([]byte(nil), b...), sr.Complete(), err
	})
}

// authFailure reports whether err is a refused authentication, which
// redialing does not cure.
func authFailure(err error) bool { return errors.Is(err, api.ErrAuthenticationFailed) }

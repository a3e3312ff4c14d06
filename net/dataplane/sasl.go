package dataplane

import (
	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/audit"
)

// saslRequest is the content of a SaslAuthenticate request (req.ext).
type saslRequest struct {
	mechanism string
	authBytes []byte
}

func parseSASL(f api.Frame, req *request) error {
	r, err := f.SaslAuthenticateRequest()
	if err != nil {
		return err
	}
	var s saslRequest
	if s.mechanism, err = r.Mechanism(); err != nil {
		return err
	}
	b, err := r.AuthBytes()
	if err != nil {
		return err
	}
	s.authBytes = append([]byte(nil), b...) // the frame is released after parsing
	req.ext = s
	return nil
}

// authenticated reports whether c proved who it is: a SCRAM exchange or a
// verified client certificate.
func (c *conn) authenticated() bool {
	return connPrincipal(c) != audit.Anonymous
}

// authGate is called by the reader for every request after the
// handshake. It answers a SaslAuthenticate request itself, in stream
// order, so the requests the client sends after its exchange see its
// outcome; with Options.AuthRequired it refuses any other request of a
// connection not authenticated with AUTHENTICATION_FAILED. It returns
// true when it answered req.
func (c *conn) authGate(req *request) bool {
	if req.kind == api.Frame_Which_saslAuthenticateRequest {
		c.releaseRequest(req)
		c.send(c.saslStep(*req))
		return true
	}
	if !c.srv.opts.AuthRequired || c.authenticated() {
		return false
	}
	c.releaseRequest(req)
	c.releaseTail(req.tail) // a publish refused before any broker saw it
	c.send(c.buildError(*req, api.NewError(api.CodeAuthenticationFailed, "%s", authRequiredText)))
	return true
}

// authRequiredText is the AUTHENTICATION_FAILED text of a request of a
// connection not authenticated under Options.AuthRequired; it names the
// ways in, as the control plane's refusal does.
const authRequiredText = "authentication required: authenticate with SASL SCRAM-SHA-256 (sq --user, SDK SASL) or a client certificate first"

// saslStep runs one step of the connection's SASL exchange (the first
// request starts it) and builds the response. A failed step ends the
// exchange; the client may start another. The wait the brute-force
// limiter imposes holds the reader: the connection does nothing else
// meanwhile.
func (c *conn) saslStep(req request) *response {
	s, _ := req.ext.(saslRequest)
	out, done, err := c.runSASL(s)
	r, f, berr := newResponse(req)
	if berr == nil {
		var sr api.SaslAuthenticateResponse
		if sr, berr = f.NewSaslAuthenticateResponse(); berr == nil {
			if berr = sr.SetAuthBytes(out); berr == nil {
				sr.SetComplete(done)
				berr = setErr(err, sr.NewError)
			}
		}
	}
	if berr != nil {
		if r != nil {
			r.release()
		}
		return c.buildError(req, api.WrapError(api.CodeUnknown, berr, "build SASL response"))
	}
	return r
}

// runSASL feeds s to the exchange in progress, or starts one.
func (c *conn) runSASL(s saslRequest) (out []byte, done bool, err error) {
	if c.user.Load() != nil {
		return nil, false, api.NewError(api.CodeAuthenticationFailed, "this connection is already authenticated")
	}
	if c.sasl == nil {
		a := c.srv.opts.Authenticator
		if a == nil {
			return nil, false, api.NewError(api.CodeAuthenticationFailed, "SASL authentication is not available on this server: it has no user store")
		}
		if c.sasl, err = a.Start(s.mechanism, c.remote); err != nil {
			return nil, false, err
		}
	}
	out, done, err = c.sasl.Step(c.readCtx, s.authBytes)
	if err != nil {
		c.sasl = nil
		return nil, false, err
	}
	if done {
		u := c.sasl.User()
		c.user.Store(&u)
		c.sasl = nil
	}
	return out, done, nil
}

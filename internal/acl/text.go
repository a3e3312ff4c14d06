package acl

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Format writes b in the textual form of the package doc, which Parse
// reads back to b: "User:alice allow read topic:orders-*".
func Format(b Binding) string {
	return formatToken(b.Principal) + " " + string(b.Permission) + " " + string(b.Operation) + " " + formatPattern(b.Pattern)
}

// String is Format(b).
func (b Binding) String() string { return Format(b) }

func formatPattern(p Pattern) string {
	if p.Type == Cluster {
		return string(Cluster)
	}
	name := p.Name
	switch {
	case p.PatternType == Prefixed:
		name = formatToken(name) + "*"
	case name == Wildcard:
	case strings.HasSuffix(name, "*"):
		name = strconv.Quote(name) // a bare one would read as a prefix
	default:
		name = formatToken(name)
	}
	return string(p.Type) + ":" + name
}

// formatToken returns s bare, or Go-quoted when it is empty, starts a
// quote or holds a blank, a quote, a backslash or a rune that is not
// printable.
func formatToken(s string) string {
	if needsQuote(s) {
		return strconv.Quote(s)
	}
	return s
}

func needsQuote(s string) bool {
	if s == "" {
		return true
	}
	for _, r := range s {
		if r == '"' || r == '\\' || r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
	}
	return false
}

// Parse reads one binding in the textual form of the package doc
// ("User:alice allow read topic:orders"), keywords in any case, fields
// separated by blanks, and validates it (Binding.Validate). Errors wrap
// ErrInvalid and name the field that is wrong.
func Parse(s string) (Binding, error) {
	toks, err := tokens(s)
	if err != nil {
		return Binding{}, err
	}
	if len(toks) != 4 {
		return Binding{}, invalid("%q: want 4 fields, PRINCIPAL allow|deny OPERATION RESOURCE (for example \"User:alice allow read topic:orders\"), got %d", s, len(toks))
	}
	principal, err := unquoteToken(toks[0])
	if err != nil {
		return Binding{}, invalid("principal %s: %v", toks[0], err)
	}
	b := Binding{
		Principal:  principal,
		Permission: Permission(strings.ToLower(toks[1])),
		Operation:  Operation(strings.ToLower(toks[2])),
	}
	if b.Pattern, err = parsePattern(toks[3]); err != nil {
		return Binding{}, err
	}
	if err := b.Validate(); err != nil {
		return Binding{}, err
	}
	return b, nil
}

// parsePattern reads "cluster", or TYPE:NAME where NAME is bare or
// quoted, a trailing "*" making it a prefix ("*" alone: the wildcard).
func parsePattern(tok string) (Pattern, error) {
	if strings.EqualFold(tok, string(Cluster)) {
		return Pattern{Type: Cluster, PatternType: Literal}, nil
	}
	typ, name, ok := strings.Cut(tok, ":")
	if !ok {
		return Pattern{}, invalid("resource %q: want cluster, topic:NAME or group:NAME", tok)
	}
	p := Pattern{Type: ResourceType(strings.ToLower(typ)), PatternType: Literal}
	if p.Type != Topic && p.Type != Group {
		return Pattern{}, invalid("resource %q: type %q, want cluster, topic:NAME or group:NAME", tok, typ)
	}
	if strings.HasPrefix(name, `"`) {
		q, err := strconv.QuotedPrefix(name)
		if err != nil {
			return Pattern{}, invalid("resource %q: bad quoted name", tok)
		}
		rest := name[len(q):]
		if rest != "" && rest != "*" {
			return Pattern{}, invalid("resource %q: %q after the quoted name, want nothing or *", tok, rest)
		}
		p.Name, _ = strconv.Unquote(q)
		if rest == "*" {
			p.PatternType = Prefixed
		}
		return p, nil
	}
	if strings.Contains(name, `"`) {
		return Pattern{}, invalid("resource %q: a name holding a quote must be quoted whole", tok)
	}
	p.Name = name
	if name != Wildcard && strings.HasSuffix(name, "*") {
		p.Name, p.PatternType = strings.TrimSuffix(name, "*"), Prefixed
	}
	return p, nil
}

// unquoteToken returns a bare token as is and a quoted one unquoted; a
// quote elsewhere in a bare token is refused.
func unquoteToken(tok string) (string, error) {
	if strings.HasPrefix(tok, `"`) {
		return strconv.Unquote(tok)
	}
	if strings.Contains(tok, `"`) {
		return "", strconv.ErrSyntax
	}
	return tok, nil
}

// tokens splits s at runs of blanks; a quoted segment (a Go string
// literal) inside a token may hold blanks.
func tokens(s string) ([]string, error) {
	var out []string
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if unicode.IsSpace(r) {
			i += size
			continue
		}
		start := i
		for i < len(s) {
			r, size := utf8.DecodeRuneInString(s[i:])
			if unicode.IsSpace(r) {
				break
			}
			if r == '"' {
				q, err := strconv.QuotedPrefix(s[i:])
				if err != nil {
					return nil, invalid("%q: unterminated or bad quoted string at byte %d", s, i)
				}
				i += len(q)
				continue
			}
			i += size
		}
		out = append(out, s[start:i])
	}
	return out, nil
}

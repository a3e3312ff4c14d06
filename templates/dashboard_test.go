package templates

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// Files of Grafana's provisioning.
const (
	datasourcesFile = "grafana/provisioning/datasources/sq.yaml"
	dashboardFile   = "grafana/dashboards/sq.json"
)

// grafanaRef is a panel's or a query's data source reference.
type grafanaRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// grafanaPanel is the part of a dashboard panel the tests read (Grafana
// dashboard JSON model, https://grafana.com/docs/grafana/latest/dashboards/build-dashboards/view-dashboard-json-model/).
type grafanaPanel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource *grafanaRef     `json:"datasource"`
	Panels     []grafanaPanel  `json:"panels"` // a collapsed row's panels
	Targets    []grafanaTarget `json:"targets"`
	FieldCfg   struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

// grafanaTarget is one query of a panel.
type grafanaTarget struct {
	RefID        string      `json:"refId"`
	Datasource   *grafanaRef `json:"datasource"`
	Expr         string      `json:"expr"`
	LegendFormat string      `json:"legendFormat"`
}

// panelQuery is one PromQL query of the dashboard.
type panelQuery struct {
	Panel grafanaPanel
	grafanaTarget
}

// readDashboard returns the dashboard's panels, rows' panels flattened.
func readDashboard(t *testing.T) []grafanaPanel {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string         `json:"uid"`
		Panels []grafanaPanel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var out []grafanaPanel
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if p.Type != "row" {
				out = append(out, p)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if len(out) == 0 {
		t.Fatalf("%s: no panels", dashboardFile)
	}
	return out
}

// promQueries returns the PromQL queries of the dashboard's panels.
func promQueries(t *testing.T) []panelQuery {
	t.Helper()
	var out []panelQuery
	for _, p := range readDashboard(t) {
		for _, q := range p.Targets {
			if q.Datasource != nil && q.Datasource.Type == "prometheus" {
				out = append(out, panelQuery{Panel: p, grafanaTarget: q})
			}
		}
	}
	return out
}

// provisionedDatasources returns the uid -> type of the provisioned data
// sources.
func provisionedDatasources(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(datasourcesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Datasources []struct {
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
		} `yaml:"datasources"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", datasourcesFile, err)
	}
	out := map[string]string{}
	for _, d := range f.Datasources {
		if d.UID == "" {
			t.Errorf("%s: data source of type %s has no fixed uid", datasourcesFile, d.Type)
		}
		out[d.UID] = d.Type
	}
	return out
}

// requireTool returns the path of a Debian prometheus tool (prometheus,
// promtool), skipping the test when it is missing, or failing it when
// CI=true (CI installs it: .ci/run).
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found (Debian: apt-get install prometheus)", name)
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and this test must run, but %s", msg)
	}
	t.Skip(msg + "; CI=true makes this a failure")
	return ""
}

// TestDashboard: every panel and query of the dashboard names a
// provisioned data source by uid, of the same type; every Prometheus
// query has a refId and parses (promtool check rules, which parses each
// query of a rule file as Prometheus does).
func TestDashboard(t *testing.T) {
	ds := provisionedDatasources(t)
	for _, want := range []string{"prometheus", "jaeger"} {
		found := false
		for _, typ := range ds {
			found = found || typ == want
		}
		if !found {
			t.Errorf("%s: no %s data source", datasourcesFile, want)
		}
	}
	check := func(where string, r *grafanaRef) {
		switch {
		case r == nil:
			t.Errorf("%s: no datasource", where)
		case ds[r.UID] == "":
			t.Errorf("%s: datasource uid %q is not provisioned (%v)", where, r.UID, ds)
		case ds[r.UID] != r.Type:
			t.Errorf("%s: datasource uid %q has type %q, provisioned as %q", where, r.UID, r.Type, ds[r.UID])
		}
	}
	for _, p := range readDashboard(t) {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		check(where, p.Datasource)
		if len(p.Targets) == 0 {
			t.Errorf("%s: no queries", where)
		}
		for _, q := range p.Targets {
			check(fmt.Sprintf("%s query %s", where, q.RefID), q.Datasource)
			if q.RefID == "" {
				t.Errorf("%s: a query without refId", where)
			}
			if q.Datasource != nil && q.Datasource.Type == "prometheus" && strings.TrimSpace(q.Expr) == "" {
				t.Errorf("%s query %s: empty expr", where, q.RefID)
			}
		}
	}
	promtool := requireTool(t, "promtool")
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for _, q := range promQueries(t) {
		expr, _ := json.Marshal(q.Expr) // a JSON string is a YAML string
		fmt.Fprintf(&rules, "      - record: dashboard:panel_%d:%s\n        expr: %s\n", q.Panel.ID, q.RefID, expr)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s\nrules:\n%s", err, out, rules.String())
	}
}

// TestPrometheusConfig: promtool check config accepts prometheus.yml.
func TestPrometheusConfig(t *testing.T) {
	promtool := requireTool(t, "promtool")
	if out, err := exec.Command(promtool, "check", "config", "prometheus.yml").CombinedOutput(); err != nil {
		t.Fatalf("promtool check config prometheus.yml: %v\n%s", err, out)
	}
}

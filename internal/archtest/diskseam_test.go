package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// seamPackages are the storage packages whose every disk call goes
// through ring.FS, ring.File and ring.Backend (docs/storage.md, "The disk
// seam"), so that internal/faultfs can fail and crash-test them. The
// value lists the calls a package may still make directly.
var seamPackages = map[string][]string{
	"engine":  nil,
	"segment": {"unix.Mmap", "unix.Munmap"}, // read-only mappings of files opened through the seam
}

// osDiskNames are the identifiers of package os that touch the disk.
var osDiskNames = []string{
	"Chdir", "Chmod", "Chown", "Chtimes", "Create", "CreateTemp", "DirFS", "File", "Lchown", "Link",
	"Lstat", "Mkdir", "MkdirAll", "MkdirTemp", "NewFile", "Open", "OpenFile", "OpenRoot", "ReadDir",
	"ReadFile", "Readlink", "Remove", "RemoveAll", "Rename", "Root", "Stat", "Symlink", "Truncate", "WriteFile",
}

// filepathDiskNames are the identifiers of path/filepath that read the disk.
var filepathDiskNames = []string{"EvalSymlinks", "Glob", "Walk", "WalkDir"}

// diskCalls returns, as "file:line: pkg.Name", every direct disk access in
// the Go source src (a file named name): a use of an identifier of os or
// path/filepath above, of io/ioutil, or of a function or type of
// golang.org/x/sys/unix or syscall (constants such as unix.ENOSPC, all
// upper case, are allowed). Names in allowed ("unix.Mmap") are skipped.
func diskCalls(fset *token.FileSet, name string, src any, allowed []string) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	pkgs := map[string]string{} // local name -> import path
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		local := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			local = imp.Name.Name
		}
		pkgs[local] = path
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		x, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		id := sel.Sel.Name
		bad := false
		switch pkgs[x.Name] {
		case "os":
			bad = slices.Contains(osDiskNames, id)
		case "path/filepath":
			bad = slices.Contains(filepathDiskNames, id)
		case "io/ioutil":
			bad = true
		case "golang.org/x/sys/unix", "syscall":
			bad = id != strings.ToUpper(id)
		}
		if bad && !slices.Contains(allowed, x.Name+"."+id) {
			found = append(found, fmt.Sprintf("%s: %s.%s", fset.Position(sel.Pos()), x.Name, id))
		}
		return true
	})
	return found, nil
}

// TestStorageGoesThroughTheSeam: engine and segment make no disk call
// outside ring's FS, File and Backend (tests excepted: they may look at
// the disk directly).
func TestStorageGoesThroughTheSeam(t *testing.T) {
	for pkg, allowed := range seamPackages {
		dir := filepath.Join("..", "..", pkg)
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		files := 0
		for _, ent := range ents {
			name := ent.Name()
			if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			files++
			found, err := diskCalls(token.NewFileSet(), filepath.Join(dir, name), nil, allowed)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range found {
				t.Errorf("%s: direct disk access; go through ring.FS (docs/storage.md, \"The disk seam\")", f)
			}
		}
		if files == 0 {
			t.Fatalf("no Go files in %s", dir)
		}
	}
}

// TestDiskCallsFindsBypasses: the checker above finds each kind of
// direct access, under any import name, and leaves constants and
// allowed calls alone.
func TestDiskCallsFindsBypasses(t *testing.T) {
	src := `package p

import (
	"io/ioutil"
	stdos "os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

var f *stdos.File

func g() {
	stdos.OpenFile("x", stdos.O_RDWR, 0)
	stdos.MkdirAll("d", 0o755)
	_ = stdos.ErrNotExist
	_ = stdos.Getpid()
	ioutil.ReadFile("x")
	filepath.WalkDir(".", nil)
	_ = filepath.Join("a", "b")
	unix.Fsync(3)
	syscall.Flock(3, syscall.LOCK_EX)
	var st unix.Statfs_t
	_ = st
	_ = unix.ENOSPC
	unix.Mmap(3, 0, 1, unix.PROT_READ, unix.MAP_SHARED)
}
`
	found, err := diskCalls(token.NewFileSet(), "p.go", src, []string{"unix.Mmap"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		got = append(got, f[strings.LastIndex(f, " ")+1:])
	}
	want := []string{"stdos.File", "stdos.OpenFile", "stdos.MkdirAll", "ioutil.ReadFile", "filepath.WalkDir", "unix.Fsync", "syscall.Flock", "unix.Statfs_t"}
	if !slices.Equal(got, want) {
		t.Fatalf("found %v, want %v", got, want)
	}
}

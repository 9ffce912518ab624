// Command refs counts the references between the files of one Go package:
// file A refers to file B when A uses a name (a function, type, method,
// field, variable or constant) that B declares. It prints the number of
// files, the number of such file-to-file edges, how many of them lie on a
// reference loop (both ends in one strongly connected component), and the
// largest loop, with its files.
// Test files are left out.
//
//	cd bench && go run ./refs ../registry
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	verbose := flag.Bool("v", false, "print every edge")
	flag.Parse()
	dir := "."
	if flag.NArg() > 0 {
		dir = flag.Arg(0)
	}
	if err := run(dir, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "refs:", err)
		os.Exit(1)
	}
}

func run(dir string, verbose bool) error {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return err
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return fmt.Errorf("no Go files in %s", dir)
	}
	// Imports outside the standard library may not resolve here; the
	// package's own names do, which is all that is counted.
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil), Error: func(error) {}}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	pkg, _ := conf.Check(files[0].Name.Name, fset, files, info)

	fileOf := func(p token.Pos) string { return filepath.Base(fset.Position(p).Filename) }
	edges := map[[2]string]bool{}
	add := func(from token.Pos, obj types.Object) {
		if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
			return
		}
		a, b := fileOf(from), fileOf(obj.Pos())
		if a != b && !strings.HasSuffix(b, "_test.go") {
			edges[[2]string{a, b}] = true
		}
	}
	for id, obj := range info.Uses {
		if obj.Parent() == nil || obj.Parent() == pkg.Scope() { // package-level names, fields and methods
			add(id.Pos(), obj)
		}
	}
	for sel, s := range info.Selections {
		add(sel.Sel.Pos(), s.Obj())
	}

	var nodes []string
	for _, f := range files {
		nodes = append(nodes, fileOf(f.Pos()))
	}
	adj := map[string][]string{}
	for e := range edges {
		adj[e[0]] = append(adj[e[0]], e[1])
	}
	comps := sccs(nodes, adj)
	compOf := map[string]int{}
	var loop []string
	for i, c := range comps {
		for _, f := range c {
			compOf[f] = i
		}
		if len(c) > len(loop) {
			loop = c
		}
	}
	// An edge lies on a reference loop when both ends are in one
	// strongly connected component: these are the back-references.
	inLoops := 0
	for e := range edges {
		if compOf[e[0]] == compOf[e[1]] {
			inLoops++
		}
	}
	fmt.Printf("files %d, edges %d, edges on loops %d, largest loop %d files\n", len(nodes), len(edges), inLoops, len(loop))
	slices.Sort(loop)
	fmt.Printf("loop: %s\n", strings.Join(loop, " "))
	if verbose {
		var all []string
		for e := range edges {
			all = append(all, e[0]+" -> "+e[1])
		}
		slices.Sort(all)
		fmt.Println(strings.Join(all, "\n"))
	}
	return nil
}

// sccs returns the strongly connected components (Tarjan).
func sccs(nodes []string, adj map[string][]string) [][]string {
	index, low := map[string]int{}, map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var all [][]string
	n := 0
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = n, n
		n++
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range adj[v] {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var comp []string
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp = append(comp, w)
				if w == v {
					break
				}
			}
			all = append(all, comp)
		}
	}
	for _, v := range nodes {
		if _, seen := index[v]; !seen {
			visit(v)
		}
	}
	return all
}

module github.com/lockyard/lockyard/chaos

go 1.26.0

require (
	github.com/gomodule/redigo v1.9.3
	github.com/lockyard/lockyard v0.0.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/petermattis/goid v0.0.0-20260820044319-269ab09b5261 // indirect
	github.com/stretchr/testify v1.10.0 // indirect
)

replace github.com/lockyard/lockyard => ../

module github.com/lockyard/lockyard

go 1.24

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/gomodule/redigo v1.9.3
	github.com/google/uuid v1.6.0
	github.com/petermattis/goid v0.0.0-20260820044319-269ab09b5261
	go.uber.org/goleak v1.3.0
)

require github.com/yuin/gopher-lua v1.1.1 // indirect

module github.com/lockyard/lockyard/rueidis

go 1.25.0

require (
	github.com/gomodule/redigo v1.9.3
	github.com/lockyard/lockyard v0.1.0
	github.com/redis/rueidis v1.0.79
	go.uber.org/goleak v1.3.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/petermattis/goid v0.0.0-20260820044319-269ab09b5261 // indirect
	golang.org/x/sys v0.47.0 // indirect
)

module github.com/lockyard/lockyard/bench

go 1.26.0

require (
	github.com/bsm/redislock v0.10.0
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/gomodule/redigo v1.9.3
	github.com/lockyard/lockyard v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/lockyard/lockyard/goredis v0.1.0
	github.com/lockyard/lockyard/rueidis v0.1.0
	github.com/petermattis/goid v0.0.0-20260820044319-269ab09b5261 // indirect
	github.com/redis/rueidis v1.0.79
	github.com/redis/rueidis/rueidiscompat v1.0.79
	go.uber.org/atomic v1.12.0 // indirect
)

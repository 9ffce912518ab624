module github.com/lockyard/lockyard/gocron

go 1.24

require (
	github.com/go-co-op/gocron/v2 v2.21.2
	github.com/gomodule/redigo v1.9.3
	github.com/lockyard/lockyard v0.1.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/jonboulle/clockwork v0.5.0 // indirect
	github.com/petermattis/goid v0.0.0-20260820044319-269ab09b5261 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
)

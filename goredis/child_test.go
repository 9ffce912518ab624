package goredis_test

const childEnv = "LOCKYARD_GOREDIS_CHILD"

func runChild(role string) int { return 2 }

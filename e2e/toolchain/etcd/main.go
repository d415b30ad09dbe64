// Command etcd is etcd's own server entry point, built from the go.etcd.io/etcd/server/v3 module.
// etcd's root module cannot be `go install`ed (it uses relative replaces), so this wrapper calls
// the same etcdmain.Main as etcd's own main package.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}

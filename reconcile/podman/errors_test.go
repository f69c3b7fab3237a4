package podman

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/meshhost/meshhost/reconcile"
)

// TestMapErrorOnEachDatabase maps the error replies podman's API service
// gave for each case, recorded from podman 4.3.1 (BoltDB), 5.4.2 on SQLite
// (its default) and 5.4.2 on a BoltDB database made by podman 4 (a machine
// upgraded from 4): the real-podman test TestErrorsMapToReconcileSentinels
// meets only the service it runs against.
func TestMapErrorOnEachDatabase(t *testing.T) {
	for _, tc := range []struct {
		db, op, reply string
		want          error
	}{
		{"any", "inspect a missing container", `{"cause":"no such container","message":"no container with name or ID \"x\" found: no such container","response":404}`, reconcile.ErrNotFound},
		{"sqlite", "remove a missing container", `{"cause":"no such container","message":"no container with ID or name \"x\" found: no such container","response":404}`, reconcile.ErrNotFound},
		{"any", "create onto a name in use", `{"cause":"that name is already in use","message":"creating container storage: the container name \"a\" is already in use by 605b7eb7da34. You have to remove that container to be able to reuse that name: that name is already in use","response":500}`, reconcile.ErrNameInUse},
		{"boltdb", "rename onto a name in use", `{"cause":"container already exists","message":"renaming container 9682c630444e: name a already in use, cannot rename container 9682c630444e: container already exists","response":409}`, reconcile.ErrNameInUse},
		{"sqlite", "rename onto a name in use", `{"cause":"UNIQUE constraint failed: ContainerConfig.Name","message":"renaming container 70e620fc99b1: updating container config table with new configuration for container 70e620fc99b1: UNIQUE constraint failed: ContainerConfig.Name","response":500}`, reconcile.ErrNameInUse},
		{"4.3", "create with a missing image", `{"cause":"image not known","message":"localhost/meshhost-nope:latest: image not known","response":500}`, nil},
		{"5.4", "create with a missing image", `{"cause":"image not known","message":"no such image: localhost/meshhost-nope:latest: image not known","response":404}`, nil},
		// Not seen: another constraint of the same table is no name in use.
		{"sqlite", "another constraint", `{"cause":"UNIQUE constraint failed: ContainerConfig.ID","message":"adding container: UNIQUE constraint failed: ContainerConfig.ID","response":500}`, nil},
	} {
		var m errorModel
		if err := json.Unmarshal([]byte(tc.reply), &m); err != nil {
			t.Fatal(err)
		}
		got := mapError(&m)
		for _, s := range []error{reconcile.ErrNotFound, reconcile.ErrNameInUse} {
			if errors.Is(got, s) != (s == tc.want) {
				t.Errorf("%s, %s: mapError(%s) = %v; errors.Is(%v) = %v, want %v", tc.db, tc.op, tc.reply, got, s, errors.Is(got, s), s == tc.want)
			}
		}
		if got.Error() == "" || !errors.Is(got, &m) && tc.want == nil {
			t.Errorf("%s, %s: mapError = %v; want the reply kept", tc.db, tc.op, got)
		}
	}
}

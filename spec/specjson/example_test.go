package specjson_test

import (
	"fmt"

	"github.com/meshhost/meshhost/spec/specjson"
)

func ExampleParseDeclaration() {
	_, err := specjson.ParseDeclaration([]byte(`{"schema": 1, "machine": "ace", "generation": 3,
	  "roster": {"generation": 1, "names": {}},
	  "containers": [{"name": "db", "image": "postgres:16", "stop_timeout": "6o s"}]}`))
	fmt.Println(err)
	// Output:
	// containers[0].stop_timeout: "6o s" is not a duration (write e.g. "30s" or "2m")
}

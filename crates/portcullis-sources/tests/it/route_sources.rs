//! Route tables and OpenAPI documents: loading, checks and conversion.

use portcullis_catalog::Rule;
use portcullis_sources::route::Safety;
use portcullis_sources::{OpenApiDocument, RouteTable, SourceError, ToolSource};
use serde_json::{Value, json};
use tempfile::TempDir;

fn table(routes: Value) -> Value {
    json!({"name": "site", "version": "1.0.0", "description": "The site app", "routes": routes})
}

fn table_err(value: Value) -> String {
    RouteTable::from_value("./apps/site", &value)
        .unwrap_err()
        .to_string()
}

#[test]
fn two_routes_become_two_sanitised_tools() {
    let table = RouteTable::from_value(
        "./apps/site",
        &table(json!([
            {"id": "devices.get", "safety": "read-only", "description": "Get a device",
             "http": {"method": "get", "path": "/devices/{id}",
                      "parameters": [
                          {"in": "path", "name": "id", "required": true, "schema": {"type": "string"}},
                          {"in": "query", "name": "limit", "schema": {"type": "integer", "minimum": 1, "maximum": 50}},
                          {"in": "cookie", "name": "session"}
                      ]}},
            {"id": "GET /devices/:id/reboot", "safety": "write", "method": "POST", "path": "/devices/:id/reboot",
             "http": {"requestBody": {"content": {"application/json": {"schema": {
                 "type": "object", "required": ["reason"],
                 "properties": {"reason": {"type": "string", "enum": ["stuck", "update"]}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}}
             }}}}}},
            {"id": "unstated", "http": {"method": "DELETE", "path": "/x"}},
            {"id": "live", "stream": true, "http": {"method": "GET", "path": "/live"}}
        ])),
    )
    .unwrap();
    let ids: Vec<&str> = table.routes.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["devices_get", "GET_devices_id_reboot", "unstated"]);
    assert_eq!(table.skipped_streams, ["live"]);

    let get = table.routes[0].tool();
    assert_eq!(get.description.as_deref(), Some("Get a device"));
    assert!(get.is_read_only());
    assert_eq!(
        get.input_schema.unwrap(),
        json!({"type": "object",
               "properties": {"id": {"type": "string", "maxLength": 16384},
                              "limit": {"type": "integer", "minimum": 1, "maximum": 50}},
               "required": ["id"]})
    );

    let reboot = table.routes[1].tool();
    // Falls back to the manifest's description.
    assert_eq!(reboot.description.as_deref(), Some("The site app"));
    let annotations = reboot.annotations.clone().unwrap();
    assert_eq!(
        (annotations.read_only_hint, annotations.destructive_hint),
        (Some(false), Some(true))
    );
    let schema = reboot.input_schema.unwrap();
    assert_eq!(schema["required"], json!(["reason"]));
    assert_eq!(
        schema["properties"]["reason"]["enum"],
        json!(["stuck", "update"])
    );
    assert_eq!(schema["properties"]["tags"]["maxItems"], 3);

    // Unstated safety is a write.
    assert_eq!(table.routes[2].safety, Safety::Write);
    assert!(!table.routes[2].tool().is_read_only());
}

#[test]
fn route_table_errors_name_the_field() {
    let cases = [
        (
            json!(["x"]),
            "ERR_PLUGIN_MANIFEST_INVALID: ./apps/site: must be a JSON object",
        ),
        (
            json!({"version": "1", "routes": []}),
            "ERR_PLUGIN_MANIFEST_INVALID: ./apps/site: missing required field \"name\"",
        ),
        (
            json!({"name": "s", "routes": []}),
            "ERR_PLUGIN_MANIFEST_INVALID: ./apps/site: missing required field \"version\"",
        ),
        (
            json!({"name": "s", "version": "1", "routes": []}),
            "ERR_PLUGIN_MANIFEST_INVALID: ./apps/site: \"routes\" must be a non-empty array",
        ),
        (
            table(json!([{"http": {"method": "GET", "path": "/"}}])),
            "ERR_PLUGIN_MANIFEST_INVALID: ./apps/site: route missing required field \"id\"",
        ),
        (
            table(json!([{"id": "a", "http": {"path": "/"}}])),
            "ERR_PLUGIN_MANIFEST_INVALID: ./apps/site: route \"a\" missing required field \"method\"",
        ),
        (
            table(json!([{"id": "a", "http": {"method": "TRACE", "path": "/"}}])),
            "ERR_PLUGIN_MANIFEST_INVALID: ./apps/site: route \"a\" has an unsupported method \"TRACE\"",
        ),
        (
            table(json!([{"id": "a", "http": {"method": "GET"}}])),
            "ERR_PLUGIN_MANIFEST_INVALID: ./apps/site: route \"a\" missing required field \"path\"",
        ),
        (
            table(json!([{"id": "a", "http": {"method": "GET", "path": "/", "parameters": {}}}])),
            "ERR_PLUGIN_MANIFEST_INVALID: ./apps/site: route \"a\" field \"http.parameters\" must be an array",
        ),
        (
            table(
                json!([{"id": "a", "permissions": "admin", "http": {"method": "GET", "path": "/"}}]),
            ),
            "ERR_PLUGIN_MANIFEST_INVALID: ./apps/site: route \"a\" field \"permissions\" must be an array of strings",
        ),
        (
            table(
                json!([{"id": "a", "http": {"method": "GET", "path": "/", "parameters": [{"in": "header", "name": "X-Portcullis-Identity"}]}}]),
            ),
            "ERR_PLUGIN_MANIFEST_INVALID: ./apps/site: route \"a\" header parameter \"X-Portcullis-Identity\" is reserved",
        ),
        (
            table(
                json!([{"id": "a", "http": {"method": "GET", "path": "/", "parameters": [{"in": "header", "name": "Signature-Input"}]}}]),
            ),
            "ERR_PLUGIN_MANIFEST_INVALID: ./apps/site: route \"a\" header parameter \"Signature-Input\" is reserved",
        ),
        (
            table(
                json!([{"id": "a", "http": {"method": "GET", "path": "/"}}, {"id": "a", "http": {"method": "GET", "path": "/b"}}]),
            ),
            "ERR_PLUGIN_ROUTE_DUPLICATE_ID: ./apps/site: duplicate route id \"a\"",
        ),
    ];
    for (value, expected) in cases {
        assert_eq!(table_err(value.clone()), expected, "for {value}");
    }
}

#[test]
fn auth_and_permissions_become_access() {
    let table = RouteTable::from_value(
        "t",
        &table(json!([{"id": "admin.report", "safety": "read-only", "auth": true, "permissions": ["reports:r"], "http": {"method": "GET", "path": "/r"}}])),
    )
    .unwrap();
    assert!(table.routes[0].access.auth);
    assert_eq!(table.routes[0].access.permissions, ["reports:r"]);
}

#[test]
fn route_tables_load_from_a_directory_or_a_file() {
    let dir = TempDir::new().unwrap();
    let missing = RouteTable::load(dir.path()).unwrap_err();
    assert_eq!(
        missing,
        SourceError::ManifestMissing {
            dir: dir.path().display().to_string()
        }
    );
    std::fs::write(
        dir.path().join("mdk-plugin.json"),
        table(json!([{"id": "a", "http": {"method": "GET", "path": "/a"}}])).to_string(),
    )
    .unwrap();
    assert_eq!(RouteTable::load(dir.path()).unwrap().routes.len(), 1);
    assert_eq!(
        RouteTable::load(dir.path().join("mdk-plugin.json"))
            .unwrap()
            .name,
        "site"
    );
    let gone = RouteTable::load(dir.path().join("other.json")).unwrap_err();
    assert_eq!(gone.code(), "ERR_PLUGIN_MANIFEST_MISSING");
}

const PETS: &str = r##"
openapi: 3.1.0
info: {title: Pets, version: "1"}
paths:
  /pets/{petId}:
    parameters:
      - $ref: "#/components/parameters/PetId"
    get:
      operationId: pets.show
      summary: Show a pet
      parameters:
        - {name: fields, in: query, schema: {type: array, items: {type: string}}}
        - {name: Content-Type, in: header, schema: {type: string}}
        - {name: sid, in: cookie, schema: {type: string}}
      responses: {"200": {description: ok}}
    put:
      x-portcullis-safety: read-only
      requestBody:
        $ref: "#/components/requestBodies/Pet"
      responses: {"200": {description: ok}}
    delete:
      x-portcullis-auth: true
      x-portcullis-permissions: [pets:w]
      responses: {"204": {description: gone}}
  /pets:
    post:
      operationId: createPets
      requestBody:
        required: true
        content:
          multipart/form-data: {schema: {type: object}}
      responses: {"201": {description: made}}
    get:
      operationId: pets.show
      responses: {"200": {description: dup}}
  /upload:
    post:
      requestBody:
        content:
          application/json: {schema: {type: array, items: {type: string}}}
      responses: {"200": {description: ok}}
  /tree:
    get:
      parameters:
        - {name: q, in: query, schema: {$ref: "#/components/schemas/Tree"}}
        - {name: ext, in: query, schema: {$ref: "other.yaml#/Thing"}}
      responses: {"200": {description: ok}}
    options:
      responses: {"200": {description: ok}}
components:
  parameters:
    PetId: {name: petId, in: path, required: true, description: The pet, schema: {type: integer}}
  requestBodies:
    Pet:
      content:
        application/json; charset=utf-8:
          schema: {$ref: "#/components/schemas/Pet"}
  schemas:
    Pet:
      allOf:
        - type: object
          required: [name]
          properties: {name: {type: string, maxLength: 40}}
        - type: object
          properties: {age: {type: [integer, "null"], minimum: 0}}
    Tree:
      type: object
      properties:
        left: {$ref: "#/components/schemas/Tree"}
        right: {$ref: "#/components/schemas/Tree"}
"##;

#[test]
fn an_openapi_document_becomes_routes_with_diagnostics() {
    let doc = OpenApiDocument::parse("pets.yaml", PETS).unwrap();
    let ids: Vec<&str> = doc.routes.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "pets_show",
            "PUT_pets_petId",
            "DELETE_pets_petId",
            "GET_tree"
        ]
    );

    let show = &doc.routes[0];
    assert_eq!(show.declared_id, "pets.show");
    assert_eq!(show.safety, Safety::ReadOnly);
    let schema = show.tool().input_schema.unwrap();
    assert_eq!(
        schema["properties"]["petId"],
        json!({"type": "integer", "description": "The pet"})
    );
    assert_eq!(schema["properties"]["fields"]["items"]["type"], "string");
    assert!(schema["properties"].get("Content-Type").is_none());
    assert!(schema["properties"].get("sid").is_none());
    assert_eq!(schema["required"], json!(["petId"]));

    let put = &doc.routes[1];
    assert_eq!(
        put.safety,
        Safety::ReadOnly,
        "x-portcullis-safety overrides the method"
    );
    let schema = put.tool().input_schema.unwrap();
    assert_eq!(schema["properties"]["name"]["maxLength"], 40);
    assert_eq!(schema["properties"]["age"]["type"], "integer");
    assert_eq!(schema["required"], json!(["petId", "name"]));

    let delete = &doc.routes[2];
    assert_eq!(delete.safety, Safety::Write);
    assert!(delete.access.auth);
    assert_eq!(delete.access.permissions, ["pets:w"]);
    assert_eq!(delete.description.as_deref(), Some("Pets"));

    let messages: Vec<String> = doc.diagnostics.iter().map(|d| d.message.clone()).collect();
    let has = |needle: &str| messages.iter().any(|m| m.contains(needle));
    assert!(
        has("header parameter \"Content-Type\" is set by the gateway"),
        "{messages:#?}"
    );
    assert!(
        has(
            "operation \"POST /pets\": requires a body in an unsupported media type (multipart/form-data); skipped"
        ),
        "{messages:#?}"
    );
    assert!(
        has("operation \"GET /pets\": tool id \"pets_show\" is already taken; skipped"),
        "{messages:#?}"
    );
    assert!(
        has("operation \"POST /upload\": has a JSON body that is not an object"),
        "{messages:#?}"
    );
    assert!(
        has("recursive $ref \"#/components/schemas/Tree\""),
        "{messages:#?}"
    );
    assert!(
        has("unresolvable $ref \"other.yaml#/Thing\""),
        "{messages:#?}"
    );
    assert!(
        has("operation \"OPTIONS /tree\": method not served as a tool"),
        "{messages:#?}"
    );
    assert!(
        doc.diagnostics
            .iter()
            .all(|d| d.rule == Rule::ServerEntryInvalid
                && d.section == "openapi"
                && d.origin == "pets.yaml")
    );
}

#[test]
fn hostile_documents_never_crash() {
    // Deep nesting in JSON and YAML.
    let deep_json = format!("{}{}", "[".repeat(50_000), "]".repeat(50_000));
    assert!(OpenApiDocument::parse("d.json", &format!("{{\"a\": {deep_json}}}")).is_err());
    let deep_yaml = format!(
        "openapi: 3.0.0\nx: {}{}",
        "[".repeat(50_000),
        "]".repeat(50_000)
    );
    let error = OpenApiDocument::parse("d.yaml", &deep_yaml).unwrap_err();
    assert_eq!(
        error.to_string(),
        "ERR_PLUGIN_MANIFEST_INVALID: d.yaml: is nested too deeply"
    );
    // Alias bombs.
    let bomb = "openapi: 3.0.0\na: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]\ni: [*h, *h, *h, *h, *h, *h, *h, *h, *h]\n";
    assert!(OpenApiDocument::parse("bomb.yaml", bomb).is_err());
    // Wrong types everywhere.
    let weird = json!({"openapi": "3.0.0", "paths": {
        "/a": {"get": "nope", "post": {"parameters": "x"}, "put": {"parameters": [{"name": 1}]}},
        "/b": 7,
        "no-slash": {"get": {}},
        "/c": {"get": {"requestBody": {"$ref": "#/nowhere"}}},
        "/d": {"$ref": "#/components/pathItems/missing"},
        "/e": {"get": {"parameters": [{"name": "x", "in": "query", "schema": {"type": 5, "properties": 3, "items": [], "required": {}}}]}}
    }});
    let doc = OpenApiDocument::from_value("weird.json", &weird).unwrap();
    assert_eq!(doc.routes.len(), 1, "{:?}", doc.diagnostics);
    assert_eq!(doc.routes[0].id, "GET_e");
    assert!(doc.diagnostics.len() >= 6, "{:#?}", doc.diagnostics);
    // A wide fan-out of references is cut off, not expanded exponentially.
    let mut schemas = serde_json::Map::new();
    for i in 0..40 {
        schemas.insert(
            format!("S{i}"),
            json!({"type": "object", "properties": {"a": {"$ref": format!("#/components/schemas/S{}", i + 1)}, "b": {"$ref": format!("#/components/schemas/S{}", i + 1)}}}),
        );
    }
    schemas.insert("S40".into(), json!({"type": "string"}));
    let fan = json!({"openapi": "3.0.0", "components": {"schemas": schemas}, "paths": {"/f": {"post": {
        "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/S0"}}}}}}}});
    let doc = OpenApiDocument::from_value("fan.json", &fan).unwrap();
    assert_eq!(doc.routes.len(), 1);
    assert!(
        doc.diagnostics
            .iter()
            .any(|d| d.message.contains("deeper than") || d.message.contains("larger than"))
    );
}

#[test]
fn openapi_files_are_read_bounded() {
    let dir = TempDir::new().unwrap();
    let missing = OpenApiDocument::load(dir.path().join("none.yaml")).unwrap_err();
    assert_eq!(missing.code(), "ERR_PLUGIN_MANIFEST_MISSING");
    let path = dir.path().join("pets.yaml");
    std::fs::write(&path, PETS).unwrap();
    assert_eq!(OpenApiDocument::load(&path).unwrap().routes.len(), 4);
}

#[test]
fn an_unusable_pattern_is_dropped_not_fatal() {
    // Found in a real-world example document: a `pattern` the validator's
    // regex engine rejects used to fail the whole server build.
    let doc = json!({"openapi": "3.0.0", "paths": {"/s": {"get": {"parameters": [
        {"name": "q", "in": "query", "schema": {"type": "string", "pattern": "^(?<name"}}
    ]}}}});
    let doc = OpenApiDocument::from_value("p.json", &doc).unwrap();
    assert_eq!(doc.routes.len(), 1);
    let schema = doc.routes[0].tool().input_schema.unwrap();
    assert!(schema["properties"]["q"].get("pattern").is_none());
    assert!(
        doc.diagnostics[0]
            .message
            .contains("is not a usable regular expression; dropped"),
        "{:?}",
        doc.diagnostics
    );
    let server = portcullis_server::ToolServer::builder()
        .register_all(
            portcullis_sources::AppSource::from_openapi(
                doc,
                portcullis_sources::App::new(portcullis_sources::AppOptions::new(
                    "p",
                    "http://127.0.0.1:9",
                ))
                .unwrap(),
            )
            .registrations(),
        )
        .build();
    assert!(server.is_ok());
}

/// Property tests of the parsers of route tables and OpenAPI documents: any
/// document (as text or as JSON of the right keys holding anything) is a
/// source or a `SourceError`, never a panic; a source that loads has only
/// legal tool names. `PROPTEST_CASES` sets the number of cases (default 256).
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "$ref",
                "agent",
                "allOf",
                "oneOf",
                "anyOf",
                "annotations",
                "auth",
                "content",
                "application/json",
                "default",
                "description",
                "enum",
                "http",
                "id",
                "in",
                "path",
                "query",
                "header",
                "inputSchema",
                "items",
                "name",
                "openapi",
                "operationId",
                "parameters",
                "paths",
                "/items/{id}",
                "/a/{b}/{c}",
                "get",
                "post",
                "delete",
                "pattern",
                "permissions",
                "properties",
                "requestBody",
                "required",
                "routes",
                "safety",
                "schema",
                "stream",
                "summary",
                "tools",
                "type",
                "method",
                "version",
                "components",
                "schemas",
                "info",
                "title",
                "format",
                "maxLength",
            ])
            .prop_map(str::to_owned),
            "\\PC{0,8}",
        ]
    }

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            prop::sample::select(vec![
                "3.0.3",
                "3.1.0",
                "1.0.0",
                "string",
                "integer",
                "object",
                "array",
                "GET",
                "POST",
                "DELETE",
                "read",
                "write",
                "/items/{id}",
                "/../x",
                "#/components/schemas/A",
                "http://127.0.0.1:1/x.json",
                "^(a+)+$",
                "[",
                "",
            ])
            .prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(5, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::vec((key(), inner), 0..6)
                    .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
            ]
        })
    }

    fn legal(name: &str) -> bool {
        !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    }

    /// A route of the right shape whose every part may be anything.
    fn route() -> impl Strategy<Value = Value> {
        let parameter = (
            prop_oneof![Just(json!("path")), Just(json!("query")), json()],
            prop_oneof![Just(json!("id")), json()],
            json(),
        )
            .prop_map(|(place, name, schema)| json!({"in": place, "name": name, "required": true, "schema": schema}));
        (
            prop_oneof!["[a-z./ :{}-]{1,12}".prop_map(Value::from), json()],
            prop_oneof![Just(json!("read-only")), Just(json!("write")), json()],
            prop_oneof![Just(json!("GET")), Just(json!("post")), json()],
            prop_oneof!["/[a-z{}:/.]{0,12}".prop_map(Value::from), json()],
            prop::collection::vec(parameter, 0..3),
            json(),
        )
            .prop_map(|(id, safety, method, path, parameters, body)| {
                json!({"id": id, "safety": safety, "description": "d",
                       "http": {"method": method, "path": path, "parameters": parameters,
                                "requestBody": {"content": {"application/json": {"schema": body}}}}})
            })
    }

    /// A path item of the right shape whose every part may be anything.
    fn operations() -> impl Strategy<Value = Value> {
        let operation = (
            prop_oneof!["[a-zA-Z_.]{1,10}".prop_map(Value::from), json()],
            json(),
            json(),
        )
            .prop_map(|(id, parameters, body)| {
                json!({"operationId": id, "parameters": parameters,
                       "requestBody": {"content": {"application/json": {"schema": body}}}})
            });
        prop::collection::vec(
            (
                "/[a-z{}/]{0,10}",
                prop::sample::select(vec!["get", "post", "put", "delete", "trace"]),
                operation,
            ),
            0..4,
        )
        .prop_map(|items| {
            let mut paths = serde_json::Map::new();
            for (path, method, operation) in items {
                paths.insert(path, json!({ method: operation }));
            }
            Value::Object(paths)
        })
    }

    fn extra_args() -> Value {
        json!({"id": "../x", "b": "a/b", "c": "", "q": [1, {"x": null}]})
    }

    /// Every route a loaded source has: a legal tool name, a schema that
    /// compiles (the gateway writes it, so it must), arguments that split.
    fn check_routes(
        routes: &[portcullis_sources::HttpRoute],
        args: &Value,
    ) -> Result<(), TestCaseError> {
        for route in routes {
            let tool = route.tool();
            prop_assert!(legal(&tool.name), "{}", tool.name);
            let schema = tool.input_schema_or_default();
            prop_assert!(
                portcullis_catalog::ArgumentValidator::compile(&tool.name, &schema).is_ok(),
                "{}",
                schema
            );
            let _ = route.split(args);
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn any_route_table_loads_or_errs(routes in prop::collection::vec(prop_oneof![route(), json()], 1..4), extra in json()) {
            let mut value = json!({"name": "site", "version": "1.0.0", "routes": routes});
            if let (Some(object), Value::Object(more)) = (value.as_object_mut(), extra) {
                object.extend(more.into_iter().filter(|(k, _)| k != "routes"));
            }
            if let Ok(table) = RouteTable::from_value("./apps/site", &value) {
                check_routes(&table.routes, &extra_args())?;
            }
        }

        #[test]
        fn any_openapi_document_loads_or_errs(paths in prop_oneof![operations(), json()], components in json(),
                                              version in prop_oneof![Just(json!("3.0.3")), Just(json!("3.1.0")), json()]) {
            let doc = json!({"openapi": version, "info": {"title": "t", "version": "1"},
                             "paths": paths, "components": components});
            if let Ok(document) = OpenApiDocument::from_value("./apps/api", &doc) {
                check_routes(&document.routes, &extra_args())?;
            }
        }

        #[test]
        fn any_openapi_text_loads_or_errs(text in "\\PC{0,300}") {
            let _ = OpenApiDocument::parse("./apps/api", &text);
        }
    }
}

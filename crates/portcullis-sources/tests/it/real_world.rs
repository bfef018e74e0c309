//! A real-world OpenAPI document no one here wrote, converted without a
//! crash and every resulting tool compiled by the server.
//!
//! The document is not committed. Point `PORTCULLIS_REAL_OPENAPI` at one or
//! more files (separated by `:`), e.g. GitHub's REST description shipped in
//! the npm package `@octokit/openapi` (`npm pack @octokit/openapi`, then
//! `package/generated/api.github.com.json`). Without it the test prints why
//! and passes. A document refused with an `ERR_…` (Swagger 2.0, over the
//! size cap) is printed; a panic, or a converted tool the server cannot
//! compile, fails the test.

use portcullis_server::{Exposure, ToolServer};
use portcullis_sources::{App, AppOptions, AppSource, OpenApiDocument, ToolSource};

#[test]
fn real_world_openapi_documents_convert() {
    let Ok(paths) = std::env::var("PORTCULLIS_REAL_OPENAPI") else {
        println!("skipped: set PORTCULLIS_REAL_OPENAPI to an OpenAPI file to run this test");
        return;
    };
    for path in paths.split(':').filter(|p| !p.is_empty()) {
        if !std::path::Path::new(path).exists() {
            println!("skipped: {path} does not exist");
            continue;
        }
        // A refusal (Swagger 2.0, too large) is an answer, not a crash.
        let document = match OpenApiDocument::load(path) {
            Ok(document) => document,
            Err(error) => {
                println!("{path}: refused: {error}");
                continue;
            }
        };
        let routes = document.routes.len();
        let diagnostics = document.diagnostics.len();
        let read_only = document
            .routes
            .iter()
            .filter(|r| r.safety == portcullis_sources::route::Safety::ReadOnly)
            .count();
        let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
        for diagnostic in &document.diagnostics {
            // "operation \"GET /x\": <what>" → count by <what>'s first words.
            let what = diagnostic
                .message
                .split(": ")
                .nth(1)
                .unwrap_or(&diagnostic.message);
            let key: String = what
                .split_whitespace()
                .take(4)
                .collect::<Vec<_>>()
                .join(" ");
            *kinds.entry(key).or_default() += 1;
        }
        let app = App::new(AppOptions::new("real", "http://127.0.0.1:9")).unwrap();
        let source = AppSource::from_openapi(document, app);
        // Every tool's schema must compile into a validator.
        let server = ToolServer::builder()
            .exposure(Exposure {
                allow_write: true,
                ..Default::default()
            })
            .register_all(source.registrations())
            .build()
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(server.tool_names().len(), routes);
        println!("{path}: {routes} tools ({read_only} read-only), {diagnostics} diagnostics");
        for (kind, count) in kinds {
            println!("  {count:>5} × {kind}");
        }
    }
}

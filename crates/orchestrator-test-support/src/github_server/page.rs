//! `GET /` of the stand-in, for a person's browser: each repository's issues and pull requests
//! with their labels, bodies, comments and, for a pull request, its branches and diff. What the API
//! serves as JSON, laid out to read; nothing on it needs the token, and nothing on it writes.

use super::Inner;

/// The page's HTML.
pub(super) fn render(inner: &Inner) -> String {
    let mut out = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>GitHub stand-in</title>\
         <style>body{font-family:sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}\
         .item{border:1px solid #ccc;border-radius:6px;padding:.5rem 1rem;margin:1rem 0}\
         .label{background:#ddf4ff;border-radius:1rem;padding:0 .5rem;margin-right:.3rem}\
         pre{background:#f6f8fa;padding:.5rem;overflow-x:auto;white-space:pre-wrap}\
         .comment{border-left:3px solid #ccc;padding-left:.5rem;margin:.5rem 0}</style>\
         </head><body><h1>GitHub stand-in</h1><p>A local server that answers GitHub's REST \
         API for the repositories below (the API is at this address; this page is for reading).\
         </p>",
    );
    if inner.repos.is_empty() {
        out.push_str("<p>No repositories.</p>");
    }
    for (name, repo) in &inner.repos {
        out.push_str(&format!("<h2>{}</h2>", escape(name)));
        for issue in repo.issues.values() {
            let kind = if issue.pull.is_some() {
                "Pull request"
            } else {
                "Issue"
            };
            out.push_str(&format!(
                "<div class=\"item\" id=\"{}-{}\"><h3>{kind} #{}: {} <small>({}, by {})</small></h3>",
                if issue.pull.is_some() { "pull" } else { "issue" },
                issue.number,
                issue.number,
                escape(&issue.title),
                escape(&issue.state),
                escape(&issue.author),
            ));
            for label in &issue.labels {
                out.push_str(&format!("<span class=\"label\">{}</span>", escape(label)));
            }
            if let Some(pull) = &issue.pull {
                out.push_str(&format!(
                    "<p>{} wants to merge <code>{}</code> into <code>{}</code>{}</p>",
                    escape(&issue.author),
                    escape(&pull.head_ref),
                    escape(&pull.base_ref),
                    if pull.draft { " (draft)" } else { "" }
                ));
            }
            out.push_str(&format!("<pre>{}</pre>", escape(&issue.body)));
            if let Some(pull) = &issue.pull
                && !pull.diff.is_empty()
            {
                out.push_str(&format!(
                    "<details><summary>The diff</summary><pre>{}</pre></details>",
                    escape(&pull.diff)
                ));
            }
            for comment in &issue.comments {
                out.push_str(&format!(
                    "<div class=\"comment\"><b>{}</b>{}<pre>{}</pre></div>",
                    escape(&comment.author),
                    if comment.updated { " (edited)" } else { "" },
                    escape(&comment.body)
                ));
            }
            out.push_str("</div>");
        }
    }
    out.push_str("</body></html>");
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

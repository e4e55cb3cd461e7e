//! view_image: shows the model an image of the workspace (a screenshot a test wrote, a chart, a
//! diagram), for models that take images; others are refused with how to say a model does.

use serde::Deserialize;
use serde_json::json;
use std::io::Read as _;

use super::fsutil::{base64, human_size};
use super::read_file::image_type;
use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::policy::ApprovalClass;
use crate::registry::blocking;
use crate::result::{Content, ToolOutcome, ToolResult, io_refusal, refuse};

/// Largest image sent: providers refuse larger ones, and each costs the context a lot.
pub const MAX_VIEW_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    path: String,
}

pub(crate) fn def() -> ToolDef {
    ToolDef {
        name: "view_image",
        description: "Look at an image file (png, jpeg, gif or webp, at most 4 MB), shown to you after the result; only for models that take images.",
        schema: schema(json!({"path": {"type": "string"}}), &["path"]),
        read_only: true,
        approval: ApprovalClass::Read,
        aliases: &[("file", "path"), ("image", "path")],
        example: json!({"path": "test-output/screenshot.png"}),
        handler: blocking("view_image", run),
    }
}

fn run(args: Args, ctx: &ToolContext) -> ToolOutcome {
    if let Some(model) = ctx
        .images
        .as_ref()
        .and_then(|m| (!m.accepts).then_some(&m.model))
    {
        return Err(refuse(format!(
            "view_image: the model {model} does not take images, so it cannot be shown one. If it does, a person sets `images = true` under [models.\"{model}\"] in the config; otherwise describe what you need from the image in words (read_file shows its size and type)."
        )));
    }
    let r = ctx.workspace.resolve(&args.path)?;
    let meta = ctx
        .workspace
        .metadata(&r)
        .map_err(|e| io_refusal("read", &r.rel, &e))?;
    if !meta.is_file() {
        return Err(refuse(format!("view_image: {} is not a file", r.rel)));
    }
    let mut file = ctx
        .workspace
        .open_read(&r)
        .map_err(|e| io_refusal("open", &r.rel, &e))?;
    let mut head = [0u8; 16];
    let n = file
        .read(&mut head)
        .map_err(|e| io_refusal("read", &r.rel, &e))?;
    let Some(media_type) = image_type(&head[..n]) else {
        return Err(refuse(format!(
            "view_image: {} is not a png, jpeg, gif or webp image (by its first bytes); read_file reads text and PDFs",
            r.rel
        )));
    };
    if meta.len() > MAX_VIEW_BYTES {
        return Err(refuse(format!(
            "view_image: {} is {}, over the {} an image may have; make a smaller one (a crop, a lower resolution) and view that",
            r.rel,
            human_size(meta.len()),
            human_size(MAX_VIEW_BYTES)
        )));
    }
    let data = ctx
        .workspace
        .read(&r)
        .map_err(|e| io_refusal("read", &r.rel, &e))?;
    ctx.reads.record(&r.abs);
    let mut result = ToolResult::text(format!(
        "Image {} ({media_type}, {}); it follows.",
        r.rel,
        human_size(meta.len())
    ));
    result.content.push(Content::Image {
        media_type: media_type.to_owned(),
        data: base64(&data),
    });
    Ok(result
        .with_meta("media_type", json!(media_type))
        .with_meta("bytes", json!(meta.len())))
}

// Model output is untrusted: Markdown with raw HTML turned off (any tag shows as text), then
// DOMPurify over the result, so no script, handler or javascript: link from a model can run.

import markdownit from "../../vendor/markdown-it.esm.js";
import DOMPurify from "../../vendor/purify.esm.js";

const markdown = markdownit({ html: false, linkify: true, breaks: false });

// Links open outside the page, without handing it a reference to this window.
DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
});

export function renderMarkdown(container, text) {
  const html = markdown.render(text || "");
  // Images are dropped too: a model's Markdown must not make the page fetch from anywhere.
  container.innerHTML = DOMPurify.sanitize(html, {
    USE_PROFILES: { html: true },
    FORBID_TAGS: ["img", "style", "form", "input", "button", "textarea", "select"],
  });
}

// The account page: copy a new key to the clipboard, and confirm before revoking a key.
// The page works without this module (plain forms); it only adds the two conveniences.

const copyButton = document.getElementById("copy-key");
if (copyButton) {
  const input = document.getElementById(copyButton.dataset.copyTarget);
  const status = document.getElementById("copy-status");
  copyButton.addEventListener("click", async () => {
    input.select();
    try {
      await navigator.clipboard.writeText(input.value);
      status.textContent = "Copied.";
    } catch {
      status.textContent = "Select the key and copy it yourself.";
    }
  });
}

for (const form of document.querySelectorAll(".revoke-form")) {
  form.addEventListener("submit", (event) => {
    const button = form.querySelector("[data-confirm]");
    if (button && !window.confirm(button.dataset.confirm)) event.preventDefault();
  });
}

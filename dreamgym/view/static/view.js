// "only differing steps" on the episode page, and j/k to move between steps. Everything else is plain HTML.
document.addEventListener("DOMContentLoaded", () => {
  const box = document.getElementById("only-diff");
  if (box) box.addEventListener("change", () => document.body.classList.toggle("only-diff", box.checked));
  const steps = Array.from(document.querySelectorAll("li.step[id]"));
  let at = -1;
  document.addEventListener("keydown", (e) => {
    if (!steps.length || e.target.closest("input,select,textarea")) return;
    if (e.key === "j" || e.key === "k") {
      at = Math.max(0, Math.min(steps.length - 1, at + (e.key === "j" ? 1 : -1)));
      steps[at].scrollIntoView({block: "start"});
    }
  });
});

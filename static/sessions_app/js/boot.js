/**
 * The page's first script (classic, not a module, loaded before the modules):
 * if one of the client's modules fails to load, because the server restarted
 * in the middle of the page load, the module graph never runs and the page
 * would show "Connecting…" forever with nothing left to retry. A failed
 * script or preload is seen here, and the page is loaded again after a
 * second or two (at most 5 times in a row; app.js marks a start).
 */
(() => {
  const KEY = "agent.boot.reloads";
  const root = document.documentElement;
  let pending = null;
  const attempts = () => {
    try {
      return Number(sessionStorage.getItem(KEY) || 0);
    } catch {
      return 0;
    }
  };
  window.addEventListener(
    "error",
    (event) => {
      const el = event.target;
      if (!(el instanceof HTMLScriptElement || el instanceof HTMLLinkElement) || pending !== null) return;
      const n = attempts();
      if (n >= 5) return;
      pending = setTimeout(
        () => {
          if (root.dataset.app === "started") return;
          try {
            sessionStorage.setItem(KEY, String(n + 1));
          } catch {
            // no storage: still reload, the limit just does not hold
          }
          window.location.reload();
        },
        1000 * 2 ** n,
      );
    },
    true,
  );
})();

// Live refresh for pages that ask for it (data-refresh seconds on <body>): the page is
// fetched again unless the operator is typing into one of its forms, has opened a detail,
// or has selected text (an idempotency key being copied to look a call up elsewhere).
(function () {
  "use strict";
  var seconds = Number(document.body.dataset.refresh || 0);
  if (!seconds) {
    return;
  }
  // What each field of each form held as the page was drawn, read back as the browser
  // holds it (a date input normalises its value, so its attribute is no guide): any
  // change since, to a filter or to a decision being written, holds the page.
  var fields = Array.prototype.slice.call(
    document.querySelectorAll("form input:not([type=hidden]), form textarea, form select")
  );
  var drawn = fields.map(function (field) {
    return field.value;
  });
  function busy() {
    var active = document.activeElement;
    if (active && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) {
      return true;
    }
    for (var i = 0; i < fields.length; i += 1) {
      if (fields[i].value !== drawn[i]) {
        return true;
      }
    }
    if (String(window.getSelection() || "") !== "") {
      return true;
    }
    return document.querySelector("details[open]:not([data-static])") !== null;
  }
  // A navigation under way (a link followed, a form sent) while the server is slow to
  // answer: a reload now would abort it, and the operator would stay where they were.
  // One the browser gave up (Esc pressed, an answer with no page) says so nowhere, so
  // the page counts as being left only for a while; past it, it refreshes again.
  var LEAVING_AT_MOST_MS = 30000;
  var leavingSince = null;
  window.addEventListener("beforeunload", function () {
    leavingSince = Date.now();
  });
  window.addEventListener("pageshow", function () {
    leavingSince = null;
  });
  function leaving() {
    return leavingSince !== null && Date.now() - leavingSince < LEAVING_AT_MOST_MS;
  }
  window.setInterval(function () {
    if (!leaving() && !busy() && document.visibilityState === "visible") {
      window.location.reload();
    }
  }, seconds * 1000);
})();

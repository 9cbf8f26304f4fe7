// The API reference at /docs: Swagger UI from the server's own files, under the WebUI's CSP.
// A file rather than FastAPI's inline script, which `script-src 'self'` refuses.
"use strict";
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  // the default would fetch a badge from a third-party validator on every load
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});

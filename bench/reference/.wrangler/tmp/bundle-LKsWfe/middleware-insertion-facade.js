				import worker, * as OTHER_EXPORTS from "/work/main/bench/reference/worker.js";
				import * as __MIDDLEWARE_0__ from "/work/main/node_modules/wrangler/templates/middleware/middleware-ensure-req-body-drained.ts";
import * as __MIDDLEWARE_1__ from "/work/main/node_modules/wrangler/templates/middleware/middleware-miniflare3-json-error.ts";

				export * from "/work/main/bench/reference/worker.js";
				const MIDDLEWARE_TEST_INJECT = "__INJECT_FOR_TESTING_WRANGLER_MIDDLEWARE__";
				export const __INTERNAL_WRANGLER_MIDDLEWARE__ = [
					
					__MIDDLEWARE_0__.default,__MIDDLEWARE_1__.default
				]
				export default worker;
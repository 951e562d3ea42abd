"""The service's routes, one router per concern: the page, health and stats, search, cases, documents.
Each parses a request, calls the library and renders its answer; the app factory (``capr.service.app``) decides
which of them need a token."""

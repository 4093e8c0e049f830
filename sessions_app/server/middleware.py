"""The base of the app's Django middleware: sync or async as the stack
around it is, with no thread hop (Django's ``MiddlewareMixin`` runs
``process_request`` and ``process_response`` on a thread under ASGI: a
client that leaves at once held that thread and its database connection).
A subclass says what it does to a response (``respond``), and may have
``process_exception``, which Django calls as it is."""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction


class Middleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self.__acall__(request)
        return self.respond(request, self.get_response(request))

    async def __acall__(self, request):
        return self.respond(request, await self.get_response(request))

    def respond(self, request, response):
        """The response, changed as this middleware does (as it is here)."""
        return response

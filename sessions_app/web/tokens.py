"""``/api/tokens/``: a user's own API keys (``access.tokens``).

Signed in with the cookie only (a key cannot make or revoke keys).
``GET`` lists them (never a key: its prefix, name, dates); ``POST {"name",
"days"}`` makes one (at most ``AGENT_TOKEN_DAYS`` days where that is set)
and answers with the key, the only time it is shown;
``DELETE tokens/<id>/`` revokes one (its streams end at once). A user sees
and revokes only their own keys; another's is 404.
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.authentication import SessionScheme
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework import generics, serializers, status
from rest_framework.response import Response

from sessions_app.access import tokens
from sessions_app.models import ApiToken
from sessions_app.web.api import AppView
from sessions_app.web.policy import CookieAuthentication

MAX_DAYS = 3650


class TokenScheme(OpenApiAuthenticationExtension):
    """The schema's name for ``access.tokens.TokenAuthentication`` (registered
    by being defined: this module is imported with the API's routes)."""

    target_class = "sessions_app.access.tokens.TokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return build_bearer_security_scheme_object(
            header_name="Authorization",
            token_prefix="Token",  # noqa: S106 (a scheme)
        )


class CookieScheme(SessionScheme):
    """The schema's name for ``web.policy.CookieAuthentication``: DRF's
    session scheme (``cookieAuth``), as the class it refines."""

    target_class = "sessions_app.web.policy.CookieAuthentication"


class TokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]
        read_only_fields = fields


class NewTokenSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    days = serializers.IntegerField(
        min_value=0,
        max_value=MAX_DAYS,
        required=False,
        help_text="days until it expires (0: never; default AGENT_TOKEN_DAYS)",
    )


class IssuedSerializer(TokenSerializer):
    key = serializers.CharField(help_text="the key: shown this once, kept nowhere")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "key"]
        read_only_fields = fields


class OwnTokens(AppView):
    # Signed in as a person, with the cookie: a key cannot make, list or
    # revoke keys (a leaked one could otherwise outlive itself).
    authentication_classes = [CookieAuthentication]

    def get_queryset(self):
        return ApiToken.objects.filter(user=self.request.user)


class TokenList(OwnTokens, generics.ListCreateAPIView):
    serializer_class = TokenSerializer
    pagination_class = None

    def create(self, request, *args, **kwargs):
        body = NewTokenSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        days = body.validated_data.get("days", settings.AGENT_TOKEN_DAYS)
        longest = settings.AGENT_TOKEN_DAYS
        if longest and not 0 < days <= longest:
            raise serializers.ValidationError(
                {"days": f"a key lives 1 to {longest} days here (AGENT_TOKEN_DAYS)"}
            )
        token, key = tokens.issue(request.user, body.validated_data["name"], days)
        data = {**TokenSerializer(token).data, "key": key}
        return Response(data, status=status.HTTP_201_CREATED)

    def get_serializer_class(self):
        return IssuedSerializer if self.request.method == "POST" else TokenSerializer


class TokenDetail(OwnTokens, generics.RetrieveDestroyAPIView):
    """One of the user's keys; DELETE revokes it (the row stays, revoked)."""

    serializer_class = TokenSerializer

    def destroy(self, request, *args, **kwargs):
        token = self.get_object()
        tokens.revoke(ApiToken.objects.filter(pk=token.pk))
        return Response(status=status.HTTP_204_NO_CONTENT)

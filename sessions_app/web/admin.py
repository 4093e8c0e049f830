"""The Django admin: sessions, their logs, runs, approval gates and sockets.

Approvals are decided and runs cancelled here through the same functions the
socket uses, so a decision in the admin is logged (``decided_by`` is the admin
user), reaches every open tab live, and continues the parked run.
"""

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction

from sessions_app import fanout
from sessions_app.access import tokens
from sessions_app.log.retention import rotate_epoch
from sessions_app.models import AgentSession, ApiToken, ApprovalRequest, Connection, Event, Run
from sessions_app.runtime import deciding, runs
from sessions_app.runtime.gates import VIA_ADMIN, Decision
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import AlreadyDecided, ApprovalCancelled, NotPending, SessionError


class ReadOnlyMixin:
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class EventInline(ReadOnlyMixin, admin.TabularInline):
    model = Event
    fields = ("seq", "kind", "run_id", "data", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("-seq",)
    max_num = 0

    def get_queryset(self, request):
        # Newest 50 only: a long log must not make the change page slow.
        qs = super().get_queryset(request)
        ids = list(qs.order_by("-seq").values_list("id", flat=True)[:50])
        return qs.filter(id__in=ids)


@admin.register(AgentSession)
class AgentSessionAdmin(admin.ModelAdmin):
    list_display = ("id", "title", "owner", "status", "head", "updated_at", "created_at")
    list_filter = ("status", "created_at")
    search_fields = ("id", "title", "owner__username")
    readonly_fields = (
        "id",
        "epoch",
        "head",
        "earliest",
        "compacted_through",
        "status",
        "created_at",
        "updated_at",
    )
    raw_id_fields = ("owner",)
    inlines = [EventInline]
    actions = ["rotate_epochs"]

    # It makes every open tab reload the session: the change permission.
    @admin.action(
        description="Rotate epoch (open tabs reload the session from the start)",
        permissions=["change"],
    )
    def rotate_epochs(self, request, queryset):
        ids = list(queryset.values_list("pk", flat=True))
        for session_id in ids:
            rotate_epoch(session_id)
        self.message_user(request, f"Rotated the epoch of {len(ids)} session(s).", messages.SUCCESS)

    def delete_model(self, request, obj):
        self.delete_queryset(request, AgentSession.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        # Lock the session rows first, the order every run transition uses:
        # the cascade would otherwise lock runs before their session and could
        # deadlock against a streaming run on PostgreSQL.
        with transaction.atomic():
            # In id order, as every group commit locks its sessions.
            rows = list(queryset.order_by("pk").select_for_update().values_list("pk", "owner_id"))
            AgentSession.objects.filter(pk__in=[pk for pk, _ in rows]).delete()
            for pk, owner_id in rows:  # gone from their owners' open lists
                fanout.session_changed_on_commit(owner_id, pk)

    def get_deleted_objects(self, objs, request):
        # A session's log goes with the session. EventAdmin refuses to delete
        # single events (the log is append-only), which must not make the
        # session itself undeletable.
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        perms_needed.discard(Event._meta.verbose_name)
        return deleted, counts, perms_needed, protected


@admin.register(Event)
class EventAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("session", "seq", "kind", "run_id", "created_at")
    list_filter = ("kind",)
    search_fields = ("session__id", "run_id")
    list_select_related = ("session",)

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "session",
        "status",
        "stop_reason",
        "client_message_id",
        "worker",
        "lease_expires_at",
        "created_at",
        "finished_at",
    )
    list_filter = ("status", "stop_reason")
    search_fields = ("id", "session__id", "client_message_id")
    readonly_fields = [f.name for f in Run._meta.fields]
    actions = ["cancel_runs"]

    def has_add_permission(self, request):
        return False

    # Cancelling ends someone's run: the change permission, not view, is needed.
    @admin.action(description="Cancel selected runs", permissions=["change"])
    def cancel_runs(self, request, queryset):
        done = 0
        for run in queryset:
            try:
                runs.cancel(run.id, request.user.get_username())
                done += 1
            except NotPending:
                self.message_user(request, f"{run.id} had already finished", messages.WARNING)
        self.message_user(request, f"cancelled {done} run(s)")


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "session",
        "tool",
        "kind",
        "status",
        "decided_by",
        "decided_via",
        "reason",
        "answer",
        "decided_at",
        "expires_at",
        "created_at",
        "executed_at",
    )
    # Who decided what, when and through which channel (the audit trail).
    list_filter = ("kind", "status", "decided_via", "tool", "decided_at")
    search_fields = ("id", "session__id", "tool_call_id", "step", "decided_by", "reason")
    readonly_fields = [f.name for f in ApprovalRequest._meta.fields]
    actions = ["approve", "deny"]

    def has_add_permission(self, request):
        return False

    def _decide(self, request, queryset, decision):
        for approval in queryset:
            try:
                by = request.user.get_username()
                deciding.decide(approval.id, Decision(decision, by, VIA_ADMIN))
            except AlreadyDecided as exc:
                self.message_user(
                    request,
                    f"{approval.id} was already decided: {exc.decision} by {exc.decided_by}",
                    messages.WARNING,
                )
            except (ApprovalCancelled, SessionError) as exc:
                # Its branch was left (its tool never runs), or it cannot be
                # decided so (a form to answer: the session's page does it).
                self.message_user(request, f"{approval.id}: {exc.message}", messages.WARNING)
            else:
                self.message_user(request, f"{approval.id}: {decision}")

    # Deciding runs a tool: the change permission, not view, is needed.
    @admin.action(description="Approve selected requests", permissions=["change"])
    def approve(self, request, queryset):
        self._decide(request, queryset, p.APPROVE)

    @admin.action(description="Deny selected requests", permissions=["change"])
    def deny(self, request, queryset):
        self._decide(request, queryset, p.DENY)


@admin.register(Connection)
class ConnectionAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "user",
        "session",
        "tab_id",
        "first_frame_type",
        "resume_after",
        "last_ack",
        "opened_at",
        "closed_at",
        "close_code",
        "clean",
    )
    list_filter = ("first_frame_type", "clean", "close_code")
    search_fields = ("id", "tab_id", "session__id", "user__username")


# --- API tokens: superusers only, never a key -----------------------------------
# A token acts as its user (it can decide approvals, which run tools). The
# database keeps only a hash (``access.tokens``): the list shows a prefix, a
# key made here is shown once, and a key is revoked, never edited.


class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "user", "name", "created_at", "expires_at", "last_used_at", "revoked")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    search_fields = ("user__username", "name", "prefix")
    fields = ("user", "name", "days")
    actions = ["revoke_tokens"]

    @admin.display(boolean=True, description="revoked")
    def revoked(self, obj) -> bool:
        return obj.revoked_at is not None

    def get_form(self, request, obj=None, change=False, **kwargs):
        from django import forms

        class NewToken(forms.ModelForm):
            days = forms.IntegerField(
                min_value=0,
                max_value=3650,
                initial=settings.AGENT_TOKEN_DAYS,
                help_text="days until it expires (0: never)",
            )

            class Meta:
                model = ApiToken
                fields = ("user", "name")

        return NewToken

    def _superuser(self, request) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_module_permission(self, request):
        return self._superuser(request)

    def has_view_permission(self, request, obj=None):
        return self._superuser(request)

    def has_add_permission(self, request):
        return self._superuser(request)

    def has_change_permission(self, request, obj=None):
        return False  # made or revoked, never edited

    def has_delete_permission(self, request, obj=None):
        # Revoking is the way to end a key (the row stays, with when); a
        # superuser may still delete rows, and users with keys.
        return self._superuser(request)

    def save_model(self, request, obj, form, change):
        made, key = tokens.issue(obj.user, obj.name, form.cleaned_data["days"])
        obj.pk = made.pk
        # Shown by this response only: never a message (the default storage
        # keeps messages in a cookie), never the session.
        request.new_api_key = (made, key)

    def log_addition(self, request, obj, message):
        pass  # the row is ``tokens.issue``'s

    def response_add(self, request, obj, post_url_continue=None):
        """The new key, on a page of its own that no cache keeps."""
        from django.template.response import TemplateResponse
        from django.utils.cache import add_never_cache_headers

        made, key = request.new_api_key
        context = {**self.admin_site.each_context(request), "token": made, "key": key}
        response = TemplateResponse(request, "sessions_app/admin_key_made.html", context).render()
        add_never_cache_headers(response)
        return response

    @admin.action(description="Revoke the selected keys")
    def revoke_tokens(self, request, queryset):
        if not self._superuser(request):
            raise PermissionDenied
        n = tokens.revoke(queryset)
        self.message_user(request, f"{n} key(s) revoked.", messages.SUCCESS)


admin.site.register(ApiToken, ApiTokenAdmin)

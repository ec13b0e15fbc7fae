"""Django admin: configured backends and recorded calls, both read-only."""
from django.contrib import admin

from .models import Call, ConfiguredBackend


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(ConfiguredBackend)
class ConfiguredBackendAdmin(ReadOnlyAdmin):
    list_display = ("name", "target", "filter_verb", "prioritize_verb", "preempt_verb", "bind_verb",
                    "weight", "http_timeout_seconds", "node_cache_capable", "ignorable")


@admin.register(Call)
class CallAdmin(ReadOnlyAdmin):
    list_display = ("started_at", "verb", "backend", "pod_namespace", "pod_name", "outcome", "node_count")
    list_filter = ("verb", "outcome", "backend")
    search_fields = ("pod_name", "pod_namespace", "pod_uid")
    exclude = ("request_body", "response_body", "decisions_blob")

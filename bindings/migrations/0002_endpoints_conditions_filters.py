"""Endpoints, several paths per route (conditions), filters, event id, start and caught-up.

Each route's old `path` becomes its first condition, and every route is served by the `default` endpoint.
"""

import django.contrib.postgres.fields
import django.db.models.deletion
from django.db import migrations, models

import bindings.models


def create_default_endpoint(apps, schema_editor):
    Endpoint = apps.get_model("bindings", "Endpoint")
    Route = apps.get_model("bindings", "Route")
    default, _ = Endpoint.objects.get_or_create(name="default")
    Route.objects.filter(endpoint__isnull=True).update(endpoint=default)


def paths_to_conditions(apps, schema_editor):
    Route = apps.get_model("bindings", "Route")
    RouteCondition = apps.get_model("bindings", "RouteCondition")
    RouteCondition.objects.bulk_create(
        RouteCondition(route_id=route_id, path=path, position=0)
        for route_id, path in Route.objects.values_list("id", "path")
    )


def conditions_to_paths(apps, schema_editor):
    """Back to one path per route: the first condition (a route's other conditions are lost)."""
    Route = apps.get_model("bindings", "Route")
    RouteCondition = apps.get_model("bindings", "RouteCondition")
    for route in Route.objects.all():
        first = RouteCondition.objects.filter(route=route).order_by("position", "id").first()
        route.path = "/" if first is None else first.path
        route.save(update_fields=["path"])


class Migration(migrations.Migration):
    dependencies = [
        ("bindings", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="Endpoint",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.SlugField(max_length=100, unique=True)),
                (
                    "retry_ms",
                    models.PositiveIntegerField(
                        default=2000, help_text="Sent as `retry:` first: how long a browser waits before reconnecting."
                    ),
                ),
                (
                    "keepalive_s",
                    models.PositiveIntegerField(
                        default=15, help_text="Seconds of silence before a keep-alive comment; 0 turns keep-alives off."
                    ),
                ),
                (
                    "cors_origins",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=255),
                        blank=True,
                        default=list,
                        help_text="Origins allowed to open streams from a browser, e.g. https://app.example.com, or *.",
                        size=None,
                    ),
                ),
                (
                    "cors_credentials",
                    models.BooleanField(
                        default=False,
                        help_text="Let browsers send cookies and HTTP authentication with cross-origin requests.",
                    ),
                ),
            ],
            options={
                "ordering": ["name"],
            },
        ),
        # Nullable first, filled with the `default` endpoint, then required, then given its default in a step of
        # its own: altering NULL to NOT NULL together with a callable default would run today's model code here.
        migrations.AddField(
            model_name="route",
            name="endpoint",
            field=models.ForeignKey(
                null=True, on_delete=django.db.models.deletion.PROTECT, related_name="routes", to="bindings.endpoint"
            ),
        ),
        migrations.RunPython(create_default_endpoint, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="route",
            name="endpoint",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="routes", to="bindings.endpoint"
            ),
        ),
        migrations.AlterField(
            model_name="route",
            name="endpoint",
            field=models.ForeignKey(
                default=bindings.models.default_endpoint,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="routes",
                to="bindings.endpoint",
            ),
        ),
        migrations.AddField(
            model_name="route",
            name="caught_up",
            field=models.BooleanField(
                default=False, help_text="Send a `caught-up` event once the stream reaches the live end of the topic."
            ),
        ),
        migrations.AddField(
            model_name="route",
            name="event_id",
            field=models.CharField(
                choices=[
                    ("${etag}", "${etag}: progress through the topic"),
                    ('["${base64(key)}","${etag}"]', '["${base64(key)}","${etag}"]: the message key and progress'),
                ],
                default="${etag}",
                help_text="The `id:` of each event.",
                max_length=64,
            ),
        ),
        migrations.AddField(
            model_name="route",
            name="start",
            field=models.CharField(
                choices=[
                    ("historical", "historical: from the earliest retained message"),
                    ("live", "live: from the end of the topic"),
                ],
                default="historical",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="route",
            name="topic",
            field=models.CharField(
                help_text="Kafka topic; may use ${params.name} declared by every path pattern.", max_length=255
            ),
        ),
        migrations.CreateModel(
            name="RouteCondition",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "path",
                    models.CharField(
                        help_text="Path pattern, e.g. /items or /items/{id}; {name} matches one path segment.",
                        max_length=255,
                    ),
                ),
                ("position", models.PositiveIntegerField(default=0)),
                (
                    "route",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="conditions", to="bindings.route"
                    ),
                ),
            ],
            options={
                "ordering": ["position", "id"],
            },
        ),
        migrations.CreateModel(
            name="RouteFilter",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("position", models.PositiveIntegerField(default=0)),
                (
                    "key",
                    models.CharField(
                        blank=True, help_text="Message key; may use ${params.name}.", max_length=1000, null=True
                    ),
                ),
                (
                    "headers",
                    models.JSONField(
                        blank=True,
                        default=dict,
                        help_text='Header name -> value, e.g. {"tag": "${params.tag}"}; a message matches if it has every one.',
                    ),
                ),
                (
                    "value_path",
                    models.CharField(
                        blank=True,
                        help_text="Dotted path into a JSON value, e.g. status or item.status.",
                        max_length=255,
                    ),
                ),
                (
                    "value_equals",
                    models.CharField(
                        blank=True,
                        help_text="The string the value at `value path` must equal; templated.",
                        max_length=1000,
                    ),
                ),
                (
                    "route",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="filters", to="bindings.route"
                    ),
                ),
            ],
            options={
                "ordering": ["position", "id"],
            },
        ),
        # A default only so that migrating backwards can add the column again to a table that has rows.
        migrations.AlterField(
            model_name="route",
            name="path",
            field=models.CharField(default="/", max_length=255),
        ),
        migrations.RunPython(paths_to_conditions, conditions_to_paths),
        migrations.RemoveField(
            model_name="route",
            name="path",
        ),
    ]

"""A route filter's CEL expression (docs/contract.md §7)."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("bindings", "0011_catalog_permissions")]

    operations = [
        migrations.AddField(
            model_name="routefilter",
            name="expression",
            field=models.TextField(
                blank=True,
                default="",
                help_text=(
                    "A CEL expression that must be true, e.g. value.order.total > 100.0 && value.region == "
                    "params.region; it reads value, key, headers, params and guarded (docs/contract.md §7)."
                ),
            ),
        ),
    ]

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0007_audit_log"),
    ]

    operations = [
        migrations.AddField(
            model_name="plan",
            name="reused_from",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="reused_by",
                to="orchestrator.plan",
            ),
        ),
    ]


admin_script
run_interval_minutes‡
script}"{fs.log.purge -daysAgo=7
volume.deleteEmpty -quietFor=24h -apply
volume.fix.replication -apply
s3.clean.uploads -timeAgo=24h*¬ (0@HˆPˆ2’À¤Øæž–Ð:plugin
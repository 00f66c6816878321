
admin_script‡
script}"{fs.log.purge -daysAgo=7
volume.deleteEmpty -quietFor=24h -apply
volume.fix.replication -apply
s3.clean.uploads -timeAgo=24h
run_interval_minutes*¬ (0@HˆPˆ2¶¾¤Øäº‘Ä:plugin
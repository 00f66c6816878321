
admin_script
run_interval_minutesá
script}"{fs.log.purge -daysAgo=7
volume.deleteEmpty -quietFor=24h -apply
volume.fix.replication -apply
s3.clean.uploads -timeAgo=24h*¨ (0@HàPà2©ø§ÿ…Ô»%:plugin
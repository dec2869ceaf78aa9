from undercloud.cli.main import main

main()

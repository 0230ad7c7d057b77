from .cli import exit_process, main

exit_process(main())
